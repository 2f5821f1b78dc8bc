/* pdu-peer: TEST TOOL, the kernel-socket client that feeds dti-pdu-server.
 *
 *   pdu-peer HOST PORT COUNT MAXLEN SEED PAYLOADS_OUT DIGESTS_OUT [CORRUPT_INDEX]
 *
 * Sends COUNT data PDUs (8-byte header: type 0x07, flags, reserved, u32
 * length; payload; u32 CRC32C of the payload, all little-endian) with
 * pseudo-random lengths 1..MAXLEN and contents from SEED, the digest
 * computed with ISA-L's crc32_iscsi on this side. Writes the payload stream
 * to PAYLOADS_OUT and "INDEX LENGTH CRC ok" lines to DIGESTS_OUT (the format
 * dti-pdu-server writes); PDU CORRUPT_INDEX, if given, carries a wrong
 * digest (its line says BAD). Then shuts down its side and waits for the
 * server to close. Exit 0 or 1.
 */
#include <isa-l/crc.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int send_all(int fd, const void *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p = (const uint8_t *)p + w;
        n -= (size_t)w;
    }
    return 0;
}

static void put_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint64_t rng_state;
static uint32_t rnd(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

int main(int argc, char **argv)
{
    if (argc != 8 && argc != 9) {
        fprintf(stderr, "usage: %s HOST PORT COUNT MAXLEN SEED PAYLOADS_OUT DIGESTS_OUT [CORRUPT_INDEX]\n", argv[0]);
        return 1;
    }
    unsigned count = (unsigned)strtoul(argv[3], NULL, 10), maxlen = (unsigned)strtoul(argv[4], NULL, 10);
    rng_state = strtoull(argv[5], NULL, 10) + 1;
    long corrupt = argc == 9 ? strtol(argv[8], NULL, 10) : -1;
    if (count == 0 || maxlen == 0 || maxlen > (16u << 20)) {
        fprintf(stderr, "pdu-peer: COUNT > 0 and MAXLEN in 1..16 MiB\n");
        return 1;
    }
    FILE *pay = fopen(argv[6], "wb"), *dig = fopen(argv[7], "w");
    if (!pay || !dig) {
        perror("pdu-peer: open");
        return 1;
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2]))};
    if (inet_pton(AF_INET, argv[1], &a.sin_addr) != 1) {
        fprintf(stderr, "pdu-peer: bad address %s\n", argv[1]);
        return 1;
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        perror("pdu-peer: connect");
        return 1;
    }
    uint8_t *buf = malloc(maxlen + 12);
    if (!buf)
        return 1;
    for (unsigned i = 0; i < count; i++) {
        uint32_t len = 1 + rnd() % maxlen;
        buf[0] = 0x07;
        buf[1] = buf[2] = buf[3] = 0;
        put_le32(buf + 4, len);
        for (uint32_t k = 0; k < len; k++)
            buf[8 + k] = (uint8_t)(rnd() >> 7);
        uint32_t crc = ~crc32_iscsi(buf + 8, (int)len, 0xffffffffu);
        put_le32(buf + 8 + len, (long)i == corrupt ? crc ^ 0x5a5a5a5au : crc);
        if (send_all(fd, buf, len + 12) < 0) {
            perror("pdu-peer: send");
            return 1;
        }
        if (fwrite(buf + 8, 1, len, pay) != len)
            return 1;
        fprintf(dig, "%u %u %08x %s\n", i, len, crc, (long)i == corrupt ? "BAD" : "ok");
    }
    shutdown(fd, SHUT_WR);
    char c;
    while (recv(fd, &c, 1, 0) > 0) {
    }
    close(fd);
    if (fclose(pay) != 0 || fclose(dig) != 0)
        return 1;
    return 0;
}
