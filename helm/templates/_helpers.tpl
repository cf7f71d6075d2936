{{/*
Names, labels and the pieces every drl pod shares. The objects, commands and environment follow
docs/kubernetes.md ("The contract every deployment of a run follows").
*/}}

{{/* The release's full name: every object name starts with it (kept short enough for the longest suffix). */}}
{{- define "drl.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The run name: runName, else the release name. */}}
{{- define "drl.run" -}}
{{- .Values.runName | default .Release.Name -}}
{{- end -}}

{{/* Labels of every object; call with (dict "ctx" $ "component" "<role>"). */}}
{{- define "drl.labels" -}}
{{ include "drl.selectorLabels" . }}
app.kubernetes.io/part-of: drl
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version | replace "+" "_" }}
drl.dev/run: {{ include "drl.run" .ctx }}
{{- end -}}

{{/* Labels a StatefulSet selects its pods and a Service its endpoints by. */}}
{{- define "drl.selectorLabels" -}}
app.kubernetes.io/name: drl
app.kubernetes.io/instance: {{ include "drl.run" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The run's configuration without `workers`: what every pod of the run runs with, whatever the number of
rollout workers (the one value a running run takes: docs/kubernetes.md, "Upgrades under Helm 4"). */}}
{{- define "drl.configWithoutWorkers" -}}
{{- omit (include "drl.configJson" . | fromJson) "workers" | toJson -}}
{{- end -}}

{{/* The pod annotation of the drl roles' Job templates: sha256 of config.json without `workers`. A changed worker
count leaves every pod template as it was (the rollout Job is resized, nothing else); any other change of the
configuration changes the template, which a Job cannot take (the chart refuses such an upgrade before applying
anything: drl.upgradeCheck). The StatefulSets (Valkey, the S3 server) do not read config.json and carry none. */}}
{{- define "drl.checksumAnnotation" -}}
checksum/config: {{ include "drl.configWithoutWorkers" . | sha256sum }}
{{- end -}}

{{/* image: "repository:tag" for a component block, falling back to the top-level image; (dict "ctx" $ "component" "trainer").
The drl image is published nowhere, so an empty repository fails the install with what to do, rather than
pods waiting in ImagePullBackOff while Helm reports success. */}}
{{- define "drl.image" -}}
{{- $own := (index .ctx.Values .component).image | default dict -}}
{{- $repository := $own.repository | default .ctx.Values.image.repository -}}
{{- if not $repository -}}
{{- $how := "build it (docker build -f docker/Dockerfile -t REGISTRY/drl:TAG .) and push it to a registry the cluster pulls from, then --set image.repository=REGISTRY/drl --set image.tag=TAG; on kind, scripts/kind-up.sh builds and loads drl:dev and scripts/kind-deploy.sh installs with it (docs/kubernetes.md, The image)" -}}
{{- fail (printf "image.repository is not set (%s.image.repository neither): the drl image is not published to any registry; %s" .component $how) -}}
{{- end -}}
{{- $tag := $own.tag | default .ctx.Values.image.tag | default .ctx.Chart.AppVersion -}}
{{- printf "%s:%s" $repository $tag -}}
{{- end -}}

{{- define "drl.imagePullPolicy" -}}
{{- $own := (index .ctx.Values .component).image | default dict -}}
{{- $own.pullPolicy | default .ctx.Values.image.pullPolicy -}}
{{- end -}}

{{/* The experiment configuration the ConfigMap holds: preset, env (when set), plugins (when set), workers, mode (when set), steps (when set),
seed, run_name, learners and memory_shards (when above 1) and the config overrides (the top-level values win).
A group of learners needs as many shards as learners, as the configuration's own check says: learners alone
(no memory.shards above 1, no config.memory_shards) get one shard each, as --learners alone does on the command
line (drl.config.learner_shards); shards set below the learners are refused. */}}
{{- define "drl.configJson" -}}
{{- $cfg := deepCopy (.Values.config | default dict) -}}
{{- $_ := set $cfg "preset" .Values.preset -}}
{{- if .Values.env -}}
{{- $_ := set $cfg "env" .Values.env -}}
{{- end -}}
{{- if .Values.plugins -}}
{{- $_ := set $cfg "plugins" .Values.plugins -}}
{{- end -}}
{{- $_ := set $cfg "workers" (int .Values.workers) -}}
{{- if .Values.mode -}}
{{- $_ := set $cfg "mode" .Values.mode -}}
{{- end -}}
{{- if not (kindIs "invalid" .Values.steps) -}}
{{- $_ := set $cfg "steps" (int64 .Values.steps) -}}
{{- end -}}
{{- $_ := set $cfg "seed" (int64 .Values.seed) -}}
{{- $_ := set $cfg "run_name" (include "drl.run" .) -}}
{{- if gt (int .Values.trainer.learners) 1 -}}
{{- $_ := set $cfg "learners" (int .Values.trainer.learners) -}}
{{- end -}}
{{- if gt (int .Values.memory.shards) 1 -}}
{{- $_ := set $cfg "memory_shards" (int .Values.memory.shards) -}}
{{- end -}}
{{- $learners := int (ternary (get $cfg "learners") 1 (hasKey $cfg "learners")) -}}
{{- if and (gt $learners 1) (not (hasKey $cfg "memory_shards")) -}}
{{- $_ := set $cfg "memory_shards" $learners -}}
{{- end -}}
{{- $shards := int (ternary (get $cfg "memory_shards") 1 (hasKey $cfg "memory_shards")) -}}
{{- if gt $learners $shards -}}
{{- $why := "each learner reads whole experience streams" -}}
{{- fail (printf "trainer.learners %d needs memory.shards %d or more: %s (got memory.shards %d)" $learners $learners $why $shards) -}}
{{- end -}}
{{- if and .Values.trainer.gpu.enabled (not (hasKey $cfg "device")) -}}
{{- $_ := set $cfg "device" "cuda" -}}
{{- end -}}
{{- toPrettyJson $cfg -}}
{{- end -}}

{{/* Learners of the run (trainer pods), as the ConfigMap holds them: 1 unless trainer.learners or config.learners
say more. */}}
{{- define "drl.learners" -}}
{{- $cfg := include "drl.configJson" . | fromJson -}}
{{- int (ternary (get $cfg "learners") 1 (hasKey $cfg "learners")) -}}
{{- end -}}

{{/* The rendezvous of a group of learners: the headless Service <fullname>-trainer-group, whose DNS names the
trainer Job's pods <fullname>-trainer-<rank>; rank 0 hosts torch.distributed's TCP store on port 29500. */}}
{{- define "drl.learnerGroup" -}}
{{- printf "%s-trainer-group" (include "drl.fullname" .) -}}
{{- end -}}

{{/* An Indexed Job's podReplacementPolicy: a replacement pod starts only once the pod it replaces has failed,
not while that pod is still terminating (the default runs both: two processes with one identity). Kubernetes
has the field from 1.29 (beta, on by default; GA in 1.34); older clusters go without it, where the memory
server's fencing alone keeps one writer per identity (docs/kubernetes.md, "One pod per identity"). "Failed",
or empty for such a cluster; call with the root context. No podFailurePolicy: restartPolicy OnFailure forbids
one. */}}
{{- define "drl.podReplacementPolicy" -}}
{{- if semverCompare ">=1.29-0" .Capabilities.KubeVersion.Version -}}
Failed
{{- end -}}
{{- end -}}

{{- define "drl.memoryUrl" -}}
{{- if .Values.externalRedis.enabled -}}
{{- $url := required "externalRedis.url is required when externalRedis.enabled" .Values.externalRedis.url -}}
{{- if regexMatch "^[a-z]+://[^/@]*:[^/@]*@" $url -}}
{{- fail "externalRedis.url must not carry a password: put it in a Secret (externalRedis.existingSecret) or credentials.redisPassword" -}}
{{- end -}}
{{- $url -}}
{{- else -}}
{{- printf "redis://%s-redis:6379/0" (include "drl.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "drl.storeUrl" -}}
{{- if .Values.externalS3.enabled -}}
{{- printf "s3://%s/%s" (required "externalS3.bucket is required" .Values.externalS3.bucket) (.Values.externalS3.prefix | trimAll "/") | trimSuffix "/" -}}
{{- else -}}
s3://drl/runs
{{- end -}}
{{- end -}}

{{- define "drl.s3Endpoint" -}}
{{- if .Values.externalS3.enabled -}}
{{- required "externalS3.endpoint is required when externalS3.enabled" .Values.externalS3.endpoint -}}
{{- else -}}
{{- printf "http://%s-s3:9000" (include "drl.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* The Secret with the run's credentials: credentials.existingSecret, else the chart's <fullname>-credentials. */}}
{{- define "drl.credentialsSecret" -}}
{{- .Values.credentials.existingSecret | default (printf "%s-credentials" (include "drl.fullname" .)) -}}
{{- end -}}

{{/* The key of one credential in that Secret; (dict "ctx" $ "which" "redis"|"access"|"secret"). The chart's own
Secret has the fixed keys; an existing one the keys credentials.*Key name. */}}
{{- define "drl.credentialsKey" -}}
{{- $c := .ctx.Values.credentials -}}
{{- $fixed := dict "redis" "redis-password" "access" "s3-access-key" "secret" "s3-secret-key" -}}
{{- if $c.existingSecret -}}
{{- index (dict "redis" $c.redisPasswordKey "access" $c.s3AccessKeyKey "secret" $c.s3SecretKeyKey) .which -}}
{{- else -}}
{{- index $fixed .which -}}
{{- end -}}
{{- end -}}

{{/* secretKeyRef of the Redis password: an external Redis's own Secret, else the run's credentials. */}}
{{- define "drl.redisPasswordRef" -}}
{{- if and .Values.externalRedis.enabled .Values.externalRedis.existingSecret -}}
name: {{ .Values.externalRedis.existingSecret }}
key: {{ .Values.externalRedis.passwordKey }}
{{- else -}}
name: {{ include "drl.credentialsSecret" . }}
key: {{ include "drl.credentialsKey" (dict "ctx" . "which" "redis") }}
{{- end -}}
{{- end -}}

{{/* secretKeyRef of an S3 credential; (dict "ctx" $ "which" "access"|"secret"): an external S3's own Secret,
else the run's credentials. */}}
{{- define "drl.s3KeyRef" -}}
{{- $s3 := .ctx.Values.externalS3 -}}
{{- if and $s3.enabled $s3.existingSecret -}}
name: {{ $s3.existingSecret }}
key: {{ ternary $s3.accessKeyKey $s3.secretKeyKey (eq .which "access") }}
{{- else -}}
name: {{ include "drl.credentialsSecret" .ctx }}
key: {{ include "drl.credentialsKey" . }}
{{- end -}}
{{- end -}}

{{/* The pod's securityContext of a component block; (dict "ctx" $ "component" "trainer"). */}}
{{- define "drl.podSecurityContext" -}}
{{- toYaml (index .ctx.Values .component).podSecurityContext -}}
{{- end -}}

{{/* The container's securityContext of a component block; (dict "ctx" $ "component" "trainer"). */}}
{{- define "drl.containerSecurityContext" -}}
{{- toYaml (index .ctx.Values .component).containerSecurityContext -}}
{{- end -}}

{{/* A component's extraVolumeMounts, as list items to follow its own mounts; (dict "ctx" $ "component" "trainer"). */}}
{{- define "drl.extraVolumeMounts" -}}
{{- with (index .ctx.Values .component).extraVolumeMounts -}}
{{- toYaml . -}}
{{- end -}}
{{- end -}}

{{/* A component's extraVolumes, as list items to follow its own volumes; (dict "ctx" $ "component" "trainer"). */}}
{{- define "drl.extraVolumes" -}}
{{- with (index .ctx.Values .component).extraVolumes -}}
{{- toYaml . -}}
{{- end -}}
{{- end -}}

{{/* Scheduling fields of a component block; (dict "ctx" $ "component" "trainer"). */}}
{{- define "drl.scheduling" -}}
{{- $c := index .ctx.Values .component -}}
{{- with $c.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $c.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .ctx.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The environment of a drl role, in the contract's order, then the component's extraEnv;
(dict "ctx" $ "role" "trainer"|"rollout"|"evaluator"). */}}
{{- define "drl.env" -}}
{{- $ctx := .ctx -}}
{{- $fullname := include "drl.fullname" $ctx -}}
{{- $group := and (eq .role "trainer") (gt (int (include "drl.learners" $ctx)) 1) -}}
- name: DRL_CONFIG
  valueFrom:
    configMapKeyRef:
      name: {{ $fullname }}-config
      key: config.json
- name: DRL_RUN
  value: {{ include "drl.run" $ctx | quote }}
- name: DRL_RUN_DIR
  value: /var/lib/drl/run
- name: DRL_MEMORY_URL
  value: {{ include "drl.memoryUrl" $ctx | quote }}
- name: DRL_MEMORY_PASSWORD
  valueFrom:
    secretKeyRef:
      {{- include "drl.redisPasswordRef" $ctx | nindent 6 }}
- name: DRL_STORE
  value: {{ include "drl.storeUrl" $ctx | quote }}
- name: DRL_S3_ENDPOINT
  value: {{ include "drl.s3Endpoint" $ctx | quote }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      {{- include "drl.s3KeyRef" (dict "ctx" $ctx "which" "access") | nindent 6 }}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      {{- include "drl.s3KeyRef" (dict "ctx" $ctx "which" "secret") | nindent 6 }}
{{- if and (eq .role "trainer") (not $ctx.Values.externalS3.enabled) }}
- name: DRL_S3_CREATE_BUCKET
  value: "1"
{{- end }}
- name: DRL_STEPS_DONE
  value: "0"
{{- if eq .role "rollout" }}
- name: DRL_WORKER_INDEX
  valueFrom:
    fieldRef:
      fieldPath: metadata.annotations['batch.kubernetes.io/job-completion-index']
{{- end }}
{{- if $group }}
- name: DRL_LEARNER_RANK
  valueFrom:
    fieldRef:
      fieldPath: metadata.annotations['batch.kubernetes.io/job-completion-index']
{{- end }}
- name: PYTHONUNBUFFERED
  value: "1"
- name: OMP_NUM_THREADS
  value: {{ ternary (($ctx.Values.config | default dict).trainer_threads | default 1 | int | toString) "1" (eq .role "trainer") | quote }}
{{- if $group }}
- name: MASTER_ADDR
  value: {{ printf "%s-trainer-0.%s" $fullname (include "drl.learnerGroup" $ctx) | quote }}
- name: MASTER_PORT
  value: "29500"
{{- end }}
{{- if eq .role "trainer" }}
- name: DRL_RUN_FILES
  value: trainer
{{- end }}
- name: DRL_HEARTBEAT_FILE
  value: /tmp/drl/heartbeat
- name: DRL_CACHE_DIR
  value: /var/cache/drl
- name: HOME
  value: /tmp
- name: DRL_CONTROL_HOST
  value: 0.0.0.0
- name: DRL_CONTROL_PORT
  value: "50051"
- name: DRL_METRICS_HOST
  value: 0.0.0.0
- name: DRL_METRICS_PORT
  value: "9090"
{{- with (index $ctx.Values .role).extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The pod template of a drl role (trainer, rollout, evaluator); (dict "ctx" $ "role" "trainer"). */}}
{{- define "drl.podTemplate" -}}
{{- $ctx := .ctx -}}
{{- $c := index $ctx.Values .role -}}
{{- $fullname := include "drl.fullname" $ctx -}}
metadata:
  labels:
    {{- include "drl.labels" (dict "ctx" $ctx "component" .role) | nindent 4 }}
  annotations:
    {{- include "drl.checksumAnnotation" $ctx | nindent 4 }}
spec:
  restartPolicy: OnFailure
  {{- if eq .role "trainer" }}
  terminationGracePeriodSeconds: 60
  {{- if gt (int (include "drl.learners" $ctx)) 1 }}
  subdomain: {{ include "drl.learnerGroup" $ctx }}
  {{- end }}
  {{- end }}
  serviceAccountName: {{ $fullname }}
  automountServiceAccountToken: false
  enableServiceLinks: false
  securityContext:
    {{- include "drl.podSecurityContext" (dict "ctx" $ctx "component" .role) | nindent 4 }}
  {{- with include "drl.scheduling" (dict "ctx" $ctx "component" .role) }}
  {{- . | trim | nindent 2 }}
  {{- end }}
  containers:
    - name: {{ .role }}
      image: {{ include "drl.image" (dict "ctx" $ctx "component" .role) | quote }}
      imagePullPolicy: {{ include "drl.imagePullPolicy" (dict "ctx" $ctx "component" .role) }}
      command: ["python", "-m", "services.{{ .role }}"]
      env:
        {{- include "drl.env" . | nindent 8 }}
      {{- $resources := deepCopy ($c.resources | default dict) }}
      {{- if and (eq .role "trainer") $c.gpu.enabled }}
      {{- $limits := get $resources "limits" | default dict }}
      {{- $_ := set $limits $c.gpu.resourceName (int $c.gpu.count) }}
      {{- $_ := set $resources "limits" $limits }}
      {{- end }}
      {{- with $resources }}
      resources:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        {{- include "drl.containerSecurityContext" (dict "ctx" $ctx "component" .role) | nindent 8 }}
      ports:
        - name: grpc
          containerPort: 50051
        - name: metrics
          containerPort: 9090
      startupProbe:
        grpc:
          port: 50051
        periodSeconds: 5
        timeoutSeconds: 5
        failureThreshold: 60
      livenessProbe:
        grpc:
          port: 50051
        periodSeconds: 30
        timeoutSeconds: 5
        failureThreshold: 3
      readinessProbe:
        grpc:
          port: 50051
        periodSeconds: 15
        timeoutSeconds: 5
        failureThreshold: 2
      volumeMounts:
        - name: tmp
          mountPath: /tmp
        - name: heartbeat
          mountPath: /tmp/drl
        - name: run
          mountPath: /var/lib/drl/run
        - name: cache
          mountPath: /var/cache/drl
        {{- with include "drl.extraVolumeMounts" (dict "ctx" $ctx "component" .role) }}
        {{- . | nindent 8 }}
        {{- end }}
  volumes:
    - name: tmp
      emptyDir: {}
    - name: heartbeat
      emptyDir:
        medium: Memory
        sizeLimit: 1Mi
    - name: run
      emptyDir: {}
    - name: cache
      emptyDir: {}
    {{- with include "drl.extraVolumes" (dict "ctx" $ctx "component" .role) }}
    {{- . | nindent 4 }}
    {{- end }}
{{- end -}}


{{/* What the pods of a drl role's Job run, part by part, as one JSON object for the Job's annotation
drl.dev/pod-template; (dict "ctx" $ "role" "trainer"). A Job's pod template is immutable, so on an upgrade the
chart compares this with the live Job's (drl.upgradeCheck) and refuses a change before anything is applied,
naming the parts that differ: "image" (the image itself), "config" (sha256 of config.json without workers),
"metadata.labels", "metadata.annotations", "spec.<field>" of the pod and "container.<field>" of its container
(short sha256 of each). `workers` is in none of them. */}}
{{- define "drl.podTemplateParts" -}}
{{- $tpl := include "drl.podTemplate" . | fromYaml -}}
{{- $meta := $tpl.metadata | default dict -}}
{{- $annotations := $meta.annotations | default dict -}}
{{- $parts := dict "config" (index $annotations "checksum/config" | default "" | trunc 16) -}}
{{- $_ := set $parts "metadata.labels" (toJson ($meta.labels | default dict) | sha256sum | trunc 16) -}}
{{- $_ := set $parts "metadata.annotations" (toJson (omit $annotations "checksum/config") | sha256sum | trunc 16) -}}
{{- range $key, $value := omit $tpl.spec "containers" -}}
{{- $_ := set $parts (printf "spec.%s" $key) (toJson $value | sha256sum | trunc 16) -}}
{{- end -}}
{{- range $container := $tpl.spec.containers -}}
{{- range $key, $value := $container -}}
{{- if eq $key "image" -}}
{{- $_ := set $parts "image" $value -}}
{{- else -}}
{{- $_ := set $parts (printf "container.%s" $key) (toJson $value | sha256sum | trunc 16) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $parts -}}
{{- end -}}

{{/* The metadata annotations of a drl role's Job; (dict "ctx" $ "role" "trainer"). */}}
{{- define "drl.jobAnnotations" -}}
drl.dev/pod-template: {{ include "drl.podTemplateParts" . | quote }}
{{- end -}}

{{/* The metadata annotation of a data server's StatefulSet naming its volume claim, which a StatefulSet cannot
change (volumeClaimTemplates are immutable): "none", or "<size> <storageClass or default>";
(dict "ctx" $ "component" "s3"). drl.upgradeCheck refuses an upgrade that would change it. */}}
{{- define "drl.claimSummary" -}}
{{- $p := (index .ctx.Values .component).persistence -}}
{{- ternary (printf "%s %s" (toString $p.size) ($p.storageClass | default "default")) "none" (and $p.enabled true) -}}
{{- end -}}

{{- define "drl.claimAnnotation" -}}
drl.dev/volume-claim: {{ include "drl.claimSummary" . | quote }}
{{- end -}}

{{/* A StatefulSet's PVC retention with persistence on: its claim goes with the release (helm uninstall deletes the
StatefulSet, and Kubernetes the claim) unless keepOnUninstall; scaling never deletes it. Takes the persistence block. */}}
{{- define "drl.claimRetention" -}}
{{- if .enabled -}}
persistentVolumeClaimRetentionPolicy:
  whenDeleted: {{ ternary "Retain" "Delete" (.keepOnUninstall | default false) }}
  whenScaled: Retain
{{- end -}}
{{- end -}}

{{/* The volumeClaimTemplates of a data server with persistence on (a PVC "data" per pod); (dict "ctx" $ "component" "s3"). */}}
{{- define "drl.volumeClaim" -}}
{{- $p := (index .ctx.Values .component).persistence -}}
{{- if $p.enabled -}}
volumeClaimTemplates:
  - apiVersion: v1
    kind: PersistentVolumeClaim
    metadata:
      name: data
      # No version labels (app.kubernetes.io/version, helm.sh/chart): a StatefulSet's volumeClaimTemplates
      # cannot change, so a new chart version must leave them as they are.
      labels:
        {{- include "drl.selectorLabels" (dict "ctx" .ctx "component" .component) | nindent 8 }}
        app.kubernetes.io/part-of: drl
        app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
        drl.dev/run: {{ include "drl.run" .ctx }}
    spec:
      accessModes: ["ReadWriteOnce"]
      {{- with $p.storageClass }}
      storageClassName: {{ . | quote }}
      {{- end }}
      resources:
        requests:
          storage: {{ $p.size | quote }}
{{- end -}}
{{- end -}}


{{/* A scaler hook Job (templates/rollout/scaler-hooks.yaml): `python -m orchestrator.backends.kubernetes.scaler ARGS` in a pod like the
trainer's, as manifests.scaler_job makes it for `drl-orchestrate scale` (the trainer's image, environment without a
group's rank and rendezvous, security contexts, service account and writable volumes; no probes, ports, scheduling
or the trainer's resources), with small resources of its own. restartPolicy Never with a pod failure policy: exit
code 2 (bad input, or the run has ended) fails the Job at once; another failure (the memory server briefly away) is
tried again, the scaler being idempotent. Helm deletes the Job whether it succeeded or failed and prints a failed
pod's log (hook-output-log-policy); (dict "ctx" $ "phase" "grow" "hook" "pre-upgrade" "args" (list ...)). */}}
{{- define "drl.scalerJob" -}}
{{- $ctx := .ctx -}}
{{- $tpl := include "drl.podTemplate" (dict "ctx" $ctx "role" "trainer") | fromYaml -}}
{{- $pod := $tpl.spec -}}
{{- $trainer := first $pod.containers -}}
{{- $env := list -}}
{{- range $e := $trainer.env -}}
{{- if not (has $e.name (list "DRL_LEARNER_RANK" "MASTER_ADDR" "MASTER_PORT")) -}}
{{- $env = append $env $e -}}
{{- end -}}
{{- end -}}
{{- $container := dict "name" "scaler" "image" $trainer.image "imagePullPolicy" $trainer.imagePullPolicy -}}
{{- $_ := set $container "command" (concat (list "python" "-m" "orchestrator.backends.kubernetes.scaler") .args) -}}
{{- $_ := set $container "env" $env -}}
{{- $_ := set $container "resources" (dict "requests" (dict "cpu" "100m" "memory" "256Mi") "limits" (dict "cpu" "1" "memory" "1Gi")) -}}
{{- range $key := list "securityContext" "volumeMounts" -}}
{{- if hasKey $trainer $key -}}
{{- $_ := set $container $key (get $trainer $key) -}}
{{- end -}}
{{- end -}}
{{- $spec := dict "restartPolicy" "Never" "containers" (list $container) -}}
{{- range $key := list "serviceAccountName" "automountServiceAccountToken" "enableServiceLinks" "securityContext" "volumes" "imagePullSecrets" -}}
{{- if hasKey $pod $key -}}
{{- $_ := set $spec $key (get $pod $key) -}}
{{- end -}}
{{- end -}}
apiVersion: batch/v1
kind: Job
metadata:
  name: {{ include "drl.fullname" $ctx }}-scaler-{{ .phase }}
  labels:
    {{- include "drl.labels" (dict "ctx" $ctx "component" "scaler") | nindent 4 }}
  annotations:
    helm.sh/hook: {{ .hook }}
    helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded,hook-failed
    helm.sh/hook-output-log-policy: hook-failed
spec:
  backoffLimit: 2
  activeDeadlineSeconds: 300
  podFailurePolicy:
    rules:
      - action: FailJob
        onExitCodes:
          containerName: scaler
          operator: In
          values: [2]
  template:
    metadata:
      labels:
        {{- include "drl.labels" (dict "ctx" $ctx "component" "scaler") | nindent 8 }}
    spec:
      {{- toYaml $spec | nindent 6 }}
{{- end -}}
