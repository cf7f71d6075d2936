{{/*
Checks against the cluster, through lookup, that fail the render before Helm applies anything (templates/checks.yaml
renders no object). Where the chart is rendered without a cluster (helm template, helm install --dry-run=client,
Argo CD, Flux), lookup returns nothing and none of them fails. docs/kubernetes.md, "Upgrades under Helm 4" and
"Storage".
*/}}

{{/* The top-level keys of two configurations (maps) whose values differ, a level deeper where both are maps
("sac.lr"); (dict "old" $old "new" $new). Output: the names, one per line. */}}
{{- define "drl.configDiff" -}}
{{- $old := .old -}}
{{- $new := .new -}}
{{- range $key := concat (keys $old) (keys $new) | uniq | sortAlpha -}}
{{- $a := get $old $key -}}
{{- $b := get $new $key -}}
{{- if or (ne (hasKey $old $key) (hasKey $new $key)) (ne (toJson $a) (toJson $b)) -}}
{{- if and (kindIs "map" $a) (kindIs "map" $b) -}}
{{- range $sub := concat (keys $a) (keys $b) | uniq | sortAlpha -}}
{{- if or (ne (hasKey $a $sub) (hasKey $b $sub)) (ne (toJson (get $a $sub)) (toJson (get $b $sub))) }}
{{ $key }}.{{ $sub }}
{{- end -}}
{{- end -}}
{{- else }}
{{ $key }}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* helm upgrade of a running run: what the live objects cannot take is refused here, before anything is applied
(the ConfigMap, the Secret, the Valkey and S3 server pods stay as they are). A Job's pod template is immutable, so
each drl role's Job must run what it runs now (its annotation drl.dev/pod-template, drl.podTemplateParts); the
configuration may change only in `workers`, which resizes the rollout Job (templates/rollout/scaler-hooks.yaml
moves the run's membership and shares with it); a StatefulSet's volume claim cannot change. */}}
{{- define "drl.upgradeCheck" -}}
{{- $fullname := include "drl.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- $problems := list -}}
{{- $configChanged := false -}}
{{- range $role := list "trainer" "rollout" "evaluator" -}}
{{- $name := printf "%s-%s" $fullname $role -}}
{{- $live := lookup "batch/v1" "Job" $ns $name -}}
{{- if $live -}}
{{- $liveParts := dig "metadata" "annotations" "drl.dev/pod-template" "" $live -}}
{{- if not $liveParts -}}
{{- $problems = append $problems (printf "Job %s has no annotation drl.dev/pod-template (an earlier chart, or made by hand), so what its pods run cannot be compared with this release" $name) -}}
{{- else -}}
{{- $old := $liveParts | fromJson -}}
{{- $new := include "drl.podTemplateParts" (dict "ctx" $ "role" $role) | fromJson -}}
{{- $changed := list -}}
{{- range $key := concat (keys $old) (keys $new) | uniq | sortAlpha -}}
{{- if ne (toString (get $old $key)) (toString (get $new $key)) -}}
{{- if eq $key "config" -}}
{{- $configChanged = true -}}
{{- else if eq $key "image" -}}
{{- $changed = append $changed (printf "image %s -> %s" (toString (get $old $key)) (toString (get $new $key))) -}}
{{- else -}}
{{- $changed = append $changed $key -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if $changed -}}
{{- $problems = append $problems (printf "Job %s, its pod template: %s" $name (join ", " $changed)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if $configChanged -}}
{{- $keys := list -}}
{{- $cm := lookup "v1" "ConfigMap" $ns (printf "%s-config" $fullname) -}}
{{- $liveConfig := dig "data" "config.json" "" $cm -}}
{{- if $liveConfig -}}
{{- $old := omit ($liveConfig | fromJson) "workers" -}}
{{- $new := include "drl.configWithoutWorkers" . | fromJson -}}
{{- $keys = include "drl.configDiff" (dict "old" $old "new" $new) | trim | splitList "\n" | compact -}}
{{- end -}}
{{- $problems = prepend $problems (printf "the run's configuration (config.json)%s" (ternary (printf ": %s" (join ", " $keys)) "" (gt (len $keys) 0))) -}}
{{- end -}}
{{- range $component := list "redis" "s3" -}}
{{- $external := index $.Values (ternary "externalS3" "externalRedis" (eq $component "s3")) -}}
{{- if not $external.enabled -}}
{{- $name := printf "%s-%s" $fullname $component -}}
{{- $live := lookup "apps/v1" "StatefulSet" $ns $name -}}
{{- $liveClaim := dig "metadata" "annotations" "drl.dev/volume-claim" "" $live -}}
{{- $newClaim := include "drl.claimSummary" (dict "ctx" $ "component" $component) -}}
{{- if and $liveClaim (ne $liveClaim $newClaim) -}}
{{- $problems = append $problems (printf "StatefulSet %s, its volume claim (%s.persistence; a StatefulSet's volumeClaimTemplates are immutable): %s -> %s" $name $component $liveClaim $newClaim) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $sizeConflict := "" -}}
{{- $rollout := lookup "batch/v1" "Job" $ns (printf "%s-rollout" $fullname) -}}
{{- $liveSize := int (dig "spec" "completions" 0 $rollout) -}}
{{- if and $rollout (ne $liveSize (int .Values.workers)) -}}
{{- $owners := list -}}
{{- range $m := dig "metadata" "managedFields" (list) $rollout -}}
{{- if not (and (eq (dig "manager" "" $m) "helm") (eq (dig "operation" "" $m) "Apply")) -}}
{{- $spec := dig "fieldsV1" "f:spec" (dict) $m -}}
{{- if or (hasKey $spec "f:completions") (hasKey $spec "f:parallelism") -}}
{{- $owners = append $owners (printf "%q" (dig "manager" "" $m)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if $owners -}}
{{- $sizeConflict = printf "helm upgrade of release %s refused before anything was applied: Job %s-rollout runs %d workers, a size set by field manager %s (drl-orchestrate scale, or kubectl), not by Helm, whose server-side apply would conflict with it once the scaler hooks had moved the run's membership to %d. Keep the size in this upgrade (--set workers=%d), and scale this run with drl-orchestrate scale %s --workers N --backend kubernetes --namespace %s." .Release.Name $fullname $liveSize (join ", " (uniq $owners)) (int .Values.workers) $liveSize (include "drl.run" .) $ns -}}
{{- end -}}
{{- end -}}
{{- if and $sizeConflict (not $problems) -}}
{{- fail $sizeConflict -}}
{{- end -}}
{{- if $problems -}}
{{- $release := .Release.Name -}}
{{- $resume := "" -}}
{{- $claim := printf "data-%s-s3-0" $fullname -}}
{{- $s3 := lookup "apps/v1" "StatefulSet" $ns (printf "%s-s3" $fullname) -}}
{{- $claimed := dig "spec" "volumeClaimTemplates" (list) $s3 -}}
{{- $retained := eq (dig "spec" "persistentVolumeClaimRetentionPolicy" "whenDeleted" "" $s3) "Retain" -}}
{{- if .Values.externalS3.enabled -}}
{{- $resume = printf "The run's policies and checkpoints are in the external S3 store: a new release with the same run name (runName, else the release name: %s) continues from the newest checkpoint." (include "drl.run" .) -}}
{{- else if and $claimed $retained -}}
{{- $resume = printf "helm uninstall keeps the S3 server's volume claim %s (keepOnUninstall), so a new release named %s continues from this run's newest checkpoint; a release of another name starts from scratch." $claim $release -}}
{{- else if $claimed -}}
{{- $resume = printf "helm uninstall deletes the S3 server's volume claim %s and with it this run's policies and checkpoints, so the new run starts from scratch; to continue from them, keep the claim first (this changes no pod): helm upgrade %s ./helm -n %s --reuse-values --set s3.persistence.keepOnUninstall=true, then uninstall and install under the same release name." $claim $release $ns -}}
{{- else if $s3 -}}
{{- $resume = "This run's policies and checkpoints are in the S3 server's emptyDir (s3.persistence.enabled=false) and go with helm uninstall: the new run starts from scratch." -}}
{{- end -}}
{{- $why := "A Job's pod template cannot change, and pods started later would read the new configuration while the others run on the old one; only `workers` changes a running run (the rollout Job is resized, and the run's membership and shares follow it)." -}}
{{- $todo := printf "To run with these values in Helm 4, start a new run: helm uninstall %s -n %s, then helm install %s ./helm -n %s with the new values (or helm install under another release name beside this one). There is no helm upgrade --force in Helm 4 (--force-replace cannot be combined with server-side apply)." $release $ns $release $ns -}}
{{- fail (printf "helm upgrade of release %s refused before anything was applied; the running run cannot take:\n  - %s\n%s\n%s%s" $release (join "\n  - " $problems) $why $todo (ternary (printf "\n%s" $resume) "" (ne $resume ""))) -}}
{{- end -}}
{{- end -}}

{{/* A data server with persistence on and no storageClass needs the cluster's default StorageClass, else its
volume claim stays Pending and the pod with it, for ever. Checked when its StatefulSet does not exist yet (an
install, or an upgrade that adds it) and lookup reaches a cluster: listing StorageClasses is cluster-scoped, so a
user without that right gets Helm's "forbidden" from lookup; storageClass (or persistence off) skips the check. */}}
{{- define "drl.storageCheck" -}}
{{- $fullname := include "drl.fullname" . -}}
{{- $classes := dict -}}
{{- range $component := list "s3" "redis" -}}
{{- $external := index $.Values (ternary "externalS3" "externalRedis" (eq $component "s3")) -}}
{{- $p := (index $.Values $component).persistence -}}
{{- if and (not $external.enabled) $p.enabled (not $p.storageClass) -}}
{{- $name := printf "%s-%s" $fullname $component -}}
{{- if not (lookup "apps/v1" "StatefulSet" $.Release.Namespace $name) -}}
{{- if not $classes -}}
{{- $classes = lookup "storage.k8s.io/v1" "StorageClass" "" "" -}}
{{- end -}}
{{- if hasKey $classes "items" -}}
{{- $names := list -}}
{{- $default := "" -}}
{{- range $sc := $classes.items -}}
{{- $names = append $names $sc.metadata.name -}}
{{- $a := $sc.metadata.annotations | default dict -}}
{{- if or (eq (get $a "storageclass.kubernetes.io/is-default-class") "true") (eq (get $a "storageclass.beta.kubernetes.io/is-default-class") "true") -}}
{{- $default = $sc.metadata.name -}}
{{- end -}}
{{- end -}}
{{- if not $default -}}
{{- $what := ternary "the S3 server's data (the run's policies and checkpoints)" "Valkey's append-only file (the run's streams and control state)" (eq $component "s3") -}}
{{- $off := ternary "an emptyDir: the run's policies and checkpoints are lost with the S3 server's pod" "Valkey in memory, the default: a restarted Valkey pod comes back empty" (eq $component "s3") -}}
{{- $have := ternary (printf "this cluster has %s, none of them the default" (join ", " $names)) "this cluster has no StorageClass" (gt (len $names) 0) -}}
{{- fail (printf "%s.persistence.enabled keeps %s on a volume claim, and %s.persistence.storageClass is empty, but %s: the claim data-%s-0 would stay Pending, and %s with it, for ever. Choose one: --set %s.persistence.storageClass=NAME (a StorageClass of this cluster), --set %s.persistence.enabled=false (%s), or make a StorageClass the default (annotation storageclass.kubernetes.io/is-default-class: \"true\")." $component $what $component $have $name (ternary "the S3 server" "Valkey" (eq $component "s3")) $component $component $off) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}


{{/* A Kubernetes quantity ("500m", "2", "1Gi", "0.5") in thousandths of its unit (millicores for cpu, millibytes
for memory), as an integer; "" when it is not a quantity this parser knows (the quota check then skips it). */}}
{{- define "drl.milliQuantity" -}}
{{- $s := toString . -}}
{{- $factors := dict "m" 1.0 "" 1000.0 "k" 1e6 "M" 1e9 "G" 1e12 "T" 1e15 "P" 1e18 "Ki" 1024000.0 "Mi" 1048576000.0 "Gi" 1073741824000.0 "Ti" 1099511627776000.0 "Pi" 1125899906842624000.0 -}}
{{- if regexMatch "^[0-9]+(\\.[0-9]+)?(m|k|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?$" $s -}}
{{- $number := regexReplaceAll "^([0-9.]+)([a-zA-Z]*)$" $s "${1}" -}}
{{- $suffix := regexReplaceAll "^([0-9.]+)([a-zA-Z]*)$" $s "${2}" -}}
{{- int64 (round (mulf (float64 $number) (get $factors $suffix)) 0) -}}
{{- end -}}
{{- end -}}

{{/* The namespace's ResourceQuotas must admit the pods the release adds, else the Job controller's pods are
refused ("exceeded quota", seen only in events) while Helm reports the release deployed (helm install --wait
does not wait for a Job's pods). On install: every pod of the run; on an upgrade that grows the rollout Job: the
added workers (the running pods are in the quota's `used`). Quotas with scopes are left out (which pods they count
depends on them); only cpu and memory requests and limits and the pod count are compared. */}}
{{- define "drl.quotaCheck" -}}
{{- $fullname := include "drl.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- $quotas := lookup "v1" "ResourceQuota" $ns "" -}}
{{- if $quotas.items -}}
{{- $counts := dict -}}
{{- if .Release.IsInstall -}}
{{- $counts = dict "trainer" (int (include "drl.learners" .)) "rollout" (int .Values.workers) "evaluator" 1 -}}
{{- if not .Values.externalRedis.enabled -}}{{- $_ := set $counts "redis" 1 -}}{{- end -}}
{{- if not .Values.externalS3.enabled -}}{{- $_ := set $counts "s3" 1 -}}{{- end -}}
{{- else -}}
{{- $live := lookup "batch/v1" "Job" $ns (printf "%s-rollout" $fullname) -}}
{{- $current := int (dig "spec" "completions" 0 $live) -}}
{{- if and $live (gt (int .Values.workers) $current) -}}
{{- $counts = dict "rollout" (sub (int .Values.workers) $current) -}}
{{- end -}}
{{- end -}}
{{- $need := dict "pods" 0 -}}
{{- $parts := dict -}}
{{- range $component, $count := $counts -}}
{{- $_ := set $need "pods" (add (get $need "pods") $count) -}}
{{- $_ := set $parts "pods" (append (get $parts "pods" | default list) (printf "%s %d" $component $count)) -}}
{{- $r := (index $.Values $component).resources | default dict -}}
{{- range $kind := list "requests" "limits" -}}
{{- range $resource := list "cpu" "memory" -}}
{{- $q := include "drl.milliQuantity" (dig $kind $resource "" $r) -}}
{{- if $q -}}
{{- $key := printf "%s.%s" $kind $resource -}}
{{- $_ := set $need $key (add (get $need $key | default 0) (mul (int64 $q) $count)) -}}
{{- $_ := set $parts $key (append (get $parts $key | default list) (printf "%s %d x %s" $component $count (toString (dig $kind $resource "" $r)))) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $_ := set $need "cpu" (get $need "requests.cpu" | default 0) -}}
{{- $_ := set $need "memory" (get $need "requests.memory" | default 0) -}}
{{- $_ := set $need "count/pods" (get $need "pods") -}}
{{- $_ := set $parts "count/pods" (get $parts "pods") -}}
{{- $_ := set $parts "cpu" (get $parts "requests.cpu" | default list) -}}
{{- $_ := set $parts "memory" (get $parts "requests.memory" | default list) -}}
{{- $problems := list -}}
{{- range $quota := $quotas.items -}}
{{- if not (or (dig "spec" "scopes" "" $quota) (dig "spec" "scopeSelector" "" $quota)) -}}
{{- $hard := dig "status" "hard" (dig "spec" "hard" (dict) $quota) $quota -}}
{{- $used := dig "status" "used" (dict) $quota -}}
{{- range $key := keys $hard | sortAlpha -}}
{{- if and (hasKey $need $key) (gt (int64 (get $need $key)) 0) -}}
{{- $pods := or (eq $key "pods") (eq $key "count/pods") -}}
{{- $h := ternary (printf "%d000" (int64 (toString (get $hard $key)))) (include "drl.milliQuantity" (get $hard $key)) $pods -}}
{{- $u := ternary (printf "%d000" (int64 (toString (get $used $key | default "0")))) (include "drl.milliQuantity" (get $used $key | default "0")) $pods -}}
{{- $n := ternary (mul (int64 (get $need $key)) 1000) (int64 (get $need $key)) $pods -}}
{{- if and $h $u (gt (int64 $n) (sub (int64 $h) (int64 $u))) -}}
{{- $left := sub (int64 $h) (int64 $u) -}}
{{- $fmt := dict "key" $key -}}
{{- $problems = append $problems (printf "ResourceQuota %s, %s: the release adds %s = %s, the quota leaves %s (hard %s, used %s)" $quota.metadata.name $key (join " + " (get $parts $key | default (list))) (include "drl.formatMilli" (merge (dict "milli" $n) $fmt)) (include "drl.formatMilli" (merge (dict "milli" (max $left 0)) $fmt)) (toString (get $hard $key)) (toString (get $used $key | default "0"))) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if $problems -}}
{{- $how := "Lower the requests (-f helm/profiles/small.yaml, or <component>.resources), or the workers, or raise the quota" -}}
{{- fail (printf "the namespace %s's ResourceQuota cannot admit the run's pods, which would wait for ever while Helm reports the release deployed (helm install --wait does not wait for a Job's pods):\n  - %s\n%s." $ns (join "\n  - " $problems) $how) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A quantity in thousandths (drl.milliQuantity) as a person reads it; (dict "key" "requests.cpu" "milli" 1500). */}}
{{- define "drl.formatMilli" -}}
{{- $m := int64 .milli -}}
{{- if hasSuffix "cpu" .key -}}
{{- divf $m 1000 | toString -}}
{{- else if hasSuffix "memory" .key -}}
{{- printf "%sMi" (divf $m 1048576000 | round 0 | int64 | toString) -}}
{{- else -}}
{{- div $m 1000 | toString -}}
{{- end -}}
{{- end -}}
