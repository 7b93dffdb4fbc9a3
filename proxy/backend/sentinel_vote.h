/* sentinel_vote.h - what a majority of the configured Sentinels say: the
 * master's address (SENTINEL GET-MASTER-ADDR-BY-NAME) and its healthy
 * replicas (SENTINEL REPLICAS), each Sentinel's answers kept as a ballot.
 * One Sentinel's word is never enough (README "Sentinel": a forged hello
 * can convince one). Pure counting: no connection, no log. */
#ifndef SLUICE_SENTINEL_VOTE_H
#define SLUICE_SENTINEL_VOTE_H

#include <stddef.h>

#define SENTINEL_VOTE_NAME_MAX 280
#define SENTINEL_VOTE_REPLICAS 16

enum sentinel_answer {
    SENTINEL_ANSWER_NONE,      /* no answer this round (down, late, an error) */
    SENTINEL_ANSWER_UNKNOWN,   /* it does not know the master */
    SENTINEL_ANSWER_ADDR       /* it names addr */
};

/* One Sentinel's answers of one round. */
struct sentinel_ballot {
    enum sentinel_answer answer;
    char addr[SENTINEL_VOTE_NAME_MAX];                          /* "host:port" */
    char replicas[SENTINEL_VOTE_REPLICAS][SENTINEL_VOTE_NAME_MAX]; /* healthy ones */
    int replica_count;
};

/* The votes a majority of COUNT configured Sentinels needs: more than half. */
int sentinel_vote_needed(int count);

/* BALLOTS: one pointer per configured Sentinel.
 * The address most of the COUNT ballots name, into OUT (SIZE bytes, ""
 * when none names one); returns how many name it. It is agreed when that
 * is at least sentinel_vote_needed(COUNT). */
int sentinel_vote_primary(const struct sentinel_ballot *const *ballots, int count, char *out,
                          size_t size);

/* The replicas of PRIMARY that at least sentinel_vote_needed(COUNT)
 * ballots naming PRIMARY list as healthy, into OUT (at most MAX). Returns
 * how many. */
int sentinel_vote_replicas(const struct sentinel_ballot *const *ballots, int count,
                           const char *primary, char out[][SENTINEL_VOTE_NAME_MAX], int max);

/* B's replicas from TEXT, a SENTINEL REPLICAS reply (LEN bytes): those
 * the Sentinel sees healthy (flags "slave" without s_down, o_down or
 * disconnected; master-link-status "ok"). Returns 0, or -1 when TEXT is
 * no such reply (B's replicas then none). */
int sentinel_vote_parse_replicas(struct sentinel_ballot *b, const char *text, size_t len);

/* "host:port" of HOST and PORT into OUT (IPv6 in brackets). */
void sentinel_vote_hostport(char *out, size_t size, const char *host, const char *port);

#endif
