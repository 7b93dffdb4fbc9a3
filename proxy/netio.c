/* netio.c - owns the direct writes of bufferevent output at the end of a
 * loop pass (see netio.h for why). */
#include "netio.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

struct evbuffer *netio_output(struct bufferevent *bev, int *write_off)
{
    if (*write_off) {
        *write_off = 0;
        bufferevent_enable(bev, EV_WRITE);
    }
    return bufferevent_get_output(bev);
}

int netio_write_now(struct bufferevent *bev, int *write_off)
{
    struct evbuffer *out = bufferevent_get_output(bev);

    if (*write_off)
        return 1;
    if (evbuffer_get_length(out) > 0) {
        /* A socket bufferevent keeps its output's start frozen outside its
         * own write callback; thaw it for this one write. Errors are left
         * for the bufferevent to meet and report on its next write. */
        evbuffer_unfreeze(out, 1);
        evbuffer_write(out, bufferevent_getfd(bev));
        evbuffer_freeze(out, 1);
    }
    if (evbuffer_get_length(out) > 0)
        return 0;
    bufferevent_disable(bev, EV_WRITE);
    *write_off = 1;
    return 1;
}
