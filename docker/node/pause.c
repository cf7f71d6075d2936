/* The sandbox ("pause") container of scripts/local-cluster.sh's real node: holds the pod's namespaces, reaps
 * orphans when it is PID 1 of a shared PID namespace, and exits 0 on SIGINT or SIGTERM, as Kubernetes' own
 * pause does. Built static (gcc -static) into the image drl.local/pause by scripts/node-images.sh. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }

static void reap(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction stop_on = {.sa_handler = stop}, reap_on = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
  if (sigaction(SIGINT, &stop_on, NULL) < 0 || sigaction(SIGTERM, &stop_on, NULL) < 0 ||
      sigaction(SIGCHLD, &reap_on, NULL) < 0)
    return 1;
  for (;;) pause();
}
