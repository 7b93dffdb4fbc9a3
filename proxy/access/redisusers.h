/* redisusers.h - users_in_redis: a Redis ACL user "sluice:NAME" for every
 * user of the users file that may run scripts but lacks some permission,
 * so that Redis itself checks each call a script makes (README: "Scripts
 * of restricted users"). */
#ifndef SLUICE_REDISUSERS_H
#define SLUICE_REDISUSERS_H

struct evbuffer;
struct user_set;
struct backend_node;
struct backend_login;

/* The prefix of the Redis users sluice keeps. */
#define REDISUSERS_PREFIX "sluice:"

/* ON: keep the users (`users_in_redis = yes`). Before the first sync. */
void redisusers_init(int on);

/* SET (the users file just loaded, at start or on a reload) is now the
 * one: each of its users that users_scripts_in_redis gets its Redis user
 * made or updated with ACL SETUSER (a random password, made once per name
 * and process, never shown), and one that went is deleted (ACL DELUSER),
 * on every node that is up; a node that comes up later gets them then
 * (redisusers_node_up). Refusals are logged and shown by PROXY INFO. */
void redisusers_sync(const struct user_set *set);

/* NODE came up (joined, or is back after a restart): send it every user. */
void redisusers_node_up(struct backend_node *node);

/* The login of user NAME's Redis user, or NULL when it has none. It
 * stays valid until redisusers_free. */
const struct backend_login *redisusers_login(const char *name);

/* PROXY INFO lines: users_in_redis, how many, and Redis's refusals. */
void redisusers_write_info(struct evbuffer *out);

void redisusers_free(void);

#endif
