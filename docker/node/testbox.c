/* A small static program for the real node's test images (scripts/node-images.sh writes it as the image
 * drl.local/testbox; it needs no shell and no libraries):
 *
 *   testbox echo TEXT...            print TEXT on stdout and exit 0
 *   testbox fail CODE TEXT...       print TEXT on stderr and exit CODE
 *   testbox sleep SECONDS           sleep, exit 0 on SIGTERM
 *   testbox serve PORT TEXT         an HTTP/1.0 server on 0.0.0.0:PORT answering every request with 200 and TEXT
 *   testbox get HOST PORT PATH [SECONDS]
 *                                   resolve HOST (getaddrinfo: /etc/hosts, then DNS per /etc/resolv.conf, with its
 *                                   search list), GET PATH, print "resolved HOST ADDRESS" and the body; retries
 *                                   for SECONDS (default 30), exit 1 with the last error after that
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }

static int join(int argc, char **argv, FILE *out) {
  for (int i = 0; i < argc; i++) fprintf(out, "%s%s", i ? " " : "", argv[i]);
  fputc('\n', out);
  fflush(out);
  return 0;
}

static int serve(const char *port, const char *text) {
  int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(atoi(port)), .sin_addr.s_addr = INADDR_ANY};
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(fd, 16) < 0) {
    perror("serve");
    return 1;
  }
  printf("serving on port %s\n", port);
  fflush(stdout);
  for (;;) {
    char buf[4096], head[256];
    int c = accept(fd, NULL, NULL);
    if (c < 0) continue;
    ssize_t n = read(c, buf, sizeof buf - 1);
    buf[n > 0 ? n : 0] = 0;
    char *eol = strpbrk(buf, "\r\n");
    if (eol) *eol = 0;
    printf("request: %s\n", buf);
    fflush(stdout);
    int len = snprintf(head, sizeof head,
                       "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                       strlen(text) + 1);
    if (write(c, head, len) < 0 || write(c, text, strlen(text)) < 0 || write(c, "\n", 1) < 0) perror("write");
    close(c);
  }
}

/* One attempt: 0 and the body printed, or 1 with the reason in err. */
static int get_once(const char *host, const char *port, const char *path, char *err, size_t errlen) {
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res;
  int rc = getaddrinfo(host, port, &hints, &res);
  if (rc) {
    snprintf(err, errlen, "resolving %s: %s", host, gai_strerror(rc));
    return 1;
  }
  char ip[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &((struct sockaddr_in *)res->ai_addr)->sin_addr, ip, sizeof ip);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct timeval tv = {.tv_sec = 5};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (connect(fd, res->ai_addr, res->ai_addrlen) < 0) {
    snprintf(err, errlen, "connecting to %s (%s) port %s: %s", host, ip, port, strerror(errno));
    freeaddrinfo(res);
    close(fd);
    return 1;
  }
  freeaddrinfo(res);
  char req[1024], buf[8192];
  int len = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, host);
  size_t got = 0;
  ssize_t n;
  if (write(fd, req, len) != len) {
    snprintf(err, errlen, "sending to %s: %s", ip, strerror(errno));
    close(fd);
    return 1;
  }
  while (got < sizeof buf - 1 && (n = read(fd, buf + got, sizeof buf - 1 - got)) > 0) got += n;
  close(fd);
  buf[got] = 0;
  char *body = strstr(buf, "\r\n\r\n");
  if (strncmp(buf, "HTTP/1.", 7) || !body) {
    snprintf(err, errlen, "no HTTP answer from %s (%s): %.80s", host, ip, buf);
    return 1;
  }
  printf("resolved %s %s\n%s", host, ip, body + 4);
  fflush(stdout);
  return 0;
}

static int get(const char *host, const char *port, const char *path, int seconds) {
  char err[512] = "";
  time_t end = time(NULL) + seconds;
  for (;;) {
    if (!get_once(host, port, path, err, sizeof err)) return 0;
    if (time(NULL) >= end) break;
    sleep(1);
  }
  fprintf(stderr, "testbox get: %s\n", err);
  return 1;
}

int main(int argc, char **argv) {
  signal(SIGTERM, stop);
  signal(SIGINT, stop);
  const char *cmd = argc > 1 ? argv[1] : "";
  if (!strcmp(cmd, "echo")) return join(argc - 2, argv + 2, stdout);
  if (!strcmp(cmd, "fail") && argc > 2) return join(argc - 3, argv + 3, stderr), atoi(argv[2]);
  if (!strcmp(cmd, "sleep") && argc == 3) {
    for (unsigned left = atoi(argv[2]); left;) left = sleep(left);
    return 0;
  }
  if (!strcmp(cmd, "serve") && argc == 4) return serve(argv[2], argv[3]);
  if (!strcmp(cmd, "get") && (argc == 5 || argc == 6)) return get(argv[2], argv[3], argv[4], argc == 6 ? atoi(argv[5]) : 30);
  fprintf(stderr, "usage: testbox echo TEXT... | fail CODE TEXT... | sleep SECONDS | serve PORT TEXT | "
                  "get HOST PORT PATH [SECONDS]\n");
  return 2;
}
