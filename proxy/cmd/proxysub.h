/* proxysub.h - the one list of PROXY subcommands with the permission each
 * needs. The users module derives its grants from it (+proxy|NAME, or
 * @admin for an admin one), the client layer its handlers (a table
 * indexed by enum proxysub_id, checked complete at start); a subcommand
 * not in this list is an error for every user. */
#ifndef SLUICE_PROXYSUB_H
#define SLUICE_PROXYSUB_H

/* Who may run it: everybody logged in, or a user granted @admin (and
 * @dangerous, as Redis's CONFIG is) or +proxy|NAME or +proxy. */
enum proxysub_perm { PROXYSUB_OPEN, PROXYSUB_ADMIN };

/* name (lower case), permission; PROXY HELP lists them in this order. */
#define PROXYSUB_LIST(X)      \
    X(ping, PROXYSUB_OPEN)    \
    X(info, PROXYSUB_ADMIN)   \
    X(rules, PROXYSUB_ADMIN)  \
    X(cluster, PROXYSUB_ADMIN) \
    X(sentinel, PROXYSUB_ADMIN) \
    X(reload, PROXYSUB_ADMIN) \
    X(slowlog, PROXYSUB_ADMIN) \
    X(top, PROXYSUB_ADMIN)    \
    X(config, PROXYSUB_ADMIN) \
    X(pause, PROXYSUB_ADMIN)  \
    X(resume, PROXYSUB_ADMIN) \
    X(drain, PROXYSUB_ADMIN)  \
    X(undrain, PROXYSUB_ADMIN) \
    X(ready, PROXYSUB_ADMIN)  \
    X(node, PROXYSUB_ADMIN)   \
    X(help, PROXYSUB_OPEN)

enum proxysub_id {
#define X(name, perm) PROXYSUB_##name,
    PROXYSUB_LIST(X)
#undef X
    PROXYSUB_COUNT
};

#endif
