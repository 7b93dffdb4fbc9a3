/* pause.c - owns sluice's view of a CLIENT PAUSE it forwarded: whether one
 * is on, its mode (WRITE or ALL) and its end. Redis blocks a paused
 * command's connection until the pause ends; on a shared connection that
 * would hold every client queued behind it. So while a pause is on,
 * client.c sends what Redis would hold on a one-shot connection instead
 * (client_detour), and sluice's own scripts go the same way. It sends
 * nothing and decides no placement itself.
 *
 *   CLIENT PAUSE t [WRITE|ALL] forwarded -> on now, until now + t (kept if later)
 *   error reply to it                    -> back to what it was before it
 *   CLIENT UNPAUSE answered +OK          -> off (kept if a PAUSE came after it)
 *   the end time passes                  -> off
 */
#include "pause.h"

#include <stdint.h>
#include <string.h>

#include "backend.h"
#include "commands.h"
#include "request.h"
#include "server.h"

enum pause_mode { PAUSE_OFF, PAUSE_WRITE, PAUSE_ALL };   /* ordered: ALL holds most */

struct pause_state {
    enum pause_mode mode;
    uint64_t until_ms;
};

static struct pause_state pause_now;
static struct pause_state pause_before;   /* before the last PAUSE noted */
static uint64_t pause_noted;              /* PAUSEs noted so far */

/* Commands that are not flagged write but that Redis 7.0 holds in WRITE
 * mode, since they may replicate. Scripts are held whatever their shebang
 * flags say: sluice cannot read those, so it over-approximates. */
static const char *const pause_may_replicate[] = {
    "eval", "evalsha", "fcall", "pfcount", "publish", "spublish",
};

/* Parse a pause timeout: a decimal count of milliseconds, as Redis takes
 * it. Returns -1 when Redis would refuse it. */
static long long pause_parse_ms(struct sv v)
{
    long long ms = 0;

    if (v.ptr == NULL || v.len == 0 || v.len > 18)   /* no overflow past now */
        return -1;
    for (size_t i = 0; i < v.len; i++) {
        if (v.ptr[i] < '0' || v.ptr[i] > '9')
            return -1;
        ms = ms * 10 + (v.ptr[i] - '0');
    }
    return ms;
}

uint64_t pause_note_request(int pause, int argc, const struct sv *argv)
{
    enum pause_mode mode = PAUSE_ALL;
    long long ms;
    uint64_t until;

    if (!pause || argc < 3 || argc > 4 || (ms = pause_parse_ms(argv[2])) < 0)
        return pause_noted;   /* UNPAUSE ends the pause only once Redis says +OK */
    if (argc == 4) {
        if (sv_ieq(argv[3], "write"))
            mode = PAUSE_WRITE;
        else if (!sv_ieq(argv[3], "all"))
            return pause_noted;   /* Redis refuses it */
    }
    pause_noted++;
    if (!pause_active())
        pause_now.until_ms = 0;
    pause_before = pause_now;
    until = server_now_ms() + (uint64_t)ms;
    if (mode > pause_now.mode)
        pause_now.mode = mode;
    if (until > pause_now.until_ms)
        pause_now.until_ms = until;
    return pause_noted;
}

void pause_note_reply(int pause, int in_multi, int type, uint64_t pauses_before)
{
    if (in_multi)
        return;
    if (pause && type == REPLY_ERROR)
        pause_now = pause_before;
    else if (!pause && type == REPLY_STATUS && pauses_before == pause_noted)
        pause_now.mode = PAUSE_OFF;
}

int pause_active(void)
{
    if (pause_now.mode == PAUSE_OFF)
        return 0;
    if (server_now_ms() < pause_now.until_ms)
        return 1;
    pause_now.mode = PAUSE_OFF;
    return 0;
}

int pause_holds(const struct command *cmd)
{
    if (pause_now.mode == PAUSE_OFF || !pause_active())
        return 0;
    if (pause_now.mode == PAUSE_ALL || cmd == NULL || (cmd->flags & CMD_WRITE))
        return 1;
    for (size_t i = 0; i < sizeof(pause_may_replicate) / sizeof(pause_may_replicate[0]); i++) {
        if (strcmp(cmd->name, pause_may_replicate[i]) == 0)
            return 1;
    }
    return 0;
}

struct backend_conn *pause_internal_conn(struct backend_node *node, unsigned long long client_id,
                                        int writes)
{
    struct backend_conn *conn = NULL;

    if (pause_active() && (writes || pause_now.mode == PAUSE_ALL))
        conn = backend_control_conn(node, NULL);   /* sluice's own */
    return conn != NULL ? conn : backend_pool_conn(node, client_id, 2);
}
