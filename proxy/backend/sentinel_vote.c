/* sentinel_vote.c - owns counting the Sentinels' ballots: the primary and
 * the replicas a majority of the configured Sentinels name, and reading
 * SENTINEL REPLICAS into a ballot. It connects nowhere and logs nothing:
 * sentinel.c asks and acts. */
#include "sentinel_vote.h"

#include <stdio.h>
#include <string.h>

#include "respwalk.h"

int sentinel_vote_needed(int count)
{
    return count / 2 + 1;
}

int sentinel_vote_primary(const struct sentinel_ballot *const *ballots, int count, char *out,
                          size_t size)
{
    int best = -1, best_votes = 0;

    for (int i = 0; i < count; i++) {
        int votes = 0;
        if (ballots[i]->answer != SENTINEL_ANSWER_ADDR)
            continue;
        for (int j = 0; j < count; j++)
            votes += ballots[j]->answer == SENTINEL_ANSWER_ADDR &&
                     strcmp(ballots[j]->addr, ballots[i]->addr) == 0;
        if (votes > best_votes) {
            best = i;
            best_votes = votes;
        }
    }
    snprintf(out, size, "%s", best >= 0 ? ballots[best]->addr : "");
    return best_votes;
}

/* Whether ballot B names PRIMARY and lists REPLICA healthy. */
static int sentinel_vote_lists(const struct sentinel_ballot *b, const char *primary,
                               const char *replica)
{
    if (b->answer != SENTINEL_ANSWER_ADDR || strcmp(b->addr, primary) != 0)
        return 0;
    for (int k = 0; k < b->replica_count; k++) {
        if (strcmp(b->replicas[k], replica) == 0)
            return 1;
    }
    return 0;
}

int sentinel_vote_replicas(const struct sentinel_ballot *const *ballots, int count,
                           const char *primary, char out[][SENTINEL_VOTE_NAME_MAX], int max)
{
    int n = 0, need = sentinel_vote_needed(count);

    for (int i = 0; i < count; i++) {
        for (int k = 0; k < ballots[i]->replica_count && n < max; k++) {
            const char *name = ballots[i]->replicas[k];
            int votes = 0, seen = 0;
            for (int j = 0; j < n; j++)
                seen |= strcmp(out[j], name) == 0;
            for (int j = 0; j < count && !seen; j++)
                votes += sentinel_vote_lists(ballots[j], primary, name);
            if (!seen && votes >= need && strcmp(name, primary) != 0)
                snprintf(out[n++], SENTINEL_VOTE_NAME_MAX, "%s", name);
        }
    }
    return n;
}

void sentinel_vote_hostport(char *out, size_t size, const char *host, const char *port)
{
    snprintf(out, size, strchr(host, ':') ? "[%s]:%s" : "%s:%s", host, port);
}

/* The value V (N bytes) into OUT when it fits, else OUT "" (a field too
 * long is no field: a replica without an ip is skipped). */
static void sentinel_vote_copy(char *out, size_t size, const char *v, size_t n)
{
    out[0] = '\0';
    if (n < size) {
        memcpy(out, v, n);
        out[n] = '\0';
    }
}

/* Whether a replica with FLAGS and LINK (master-link-status) is healthy
 * in its Sentinel's eyes. */
static int sentinel_vote_healthy(const char *flags, const char *link)
{
    static const char *const bad[] = {"s_down", "o_down", "disconnected"};

    if (strstr(flags, "slave") == NULL || strcmp(link, "ok") != 0)
        return 0;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (strstr(flags, bad[i]) != NULL)
            return 0;
    }
    return 1;
}

int sentinel_vote_parse_replicas(struct sentinel_ballot *b, const char *text, size_t len)
{
    struct respwalk w = {text, text + len};
    long long count, fields;
    char ip[256], port[16], flags[128], link[16];

    b->replica_count = 0;
    if (respwalk_array(&w, &count) != 0)
        return -1;
    for (long long i = 0; i < count; i++) {
        if (respwalk_array(&w, &fields) != 0)
            return -1;
        ip[0] = port[0] = flags[0] = link[0] = '\0';
        for (long long f = 0; f + 1 < fields; f += 2) {
            const char *k, *v;
            size_t kn, vn;
            if (respwalk_bulk(&w, &k, &kn) != 0 || respwalk_bulk(&w, &v, &vn) != 0) {
                b->replica_count = 0;
                return -1;
            }
            if (kn == 2 && memcmp(k, "ip", 2) == 0)
                sentinel_vote_copy(ip, sizeof(ip), v, vn);
            else if (kn == 4 && memcmp(k, "port", 4) == 0)
                sentinel_vote_copy(port, sizeof(port), v, vn);
            else if (kn == 5 && memcmp(k, "flags", 5) == 0)
                sentinel_vote_copy(flags, sizeof(flags), v, vn);
            else if (kn == 18 && memcmp(k, "master-link-status", 18) == 0)
                sentinel_vote_copy(link, sizeof(link), v, vn);
        }
        if (fields % 2 != 0 && respwalk_skip(&w, 1) != 0)
            return -1;
        if (ip[0] != '\0' && port[0] != '\0' && sentinel_vote_healthy(flags, link) &&
            b->replica_count < SENTINEL_VOTE_REPLICAS)
            sentinel_vote_hostport(b->replicas[b->replica_count++], SENTINEL_VOTE_NAME_MAX, ip,
                                   port);
    }
    return 0;
}
