/* test_slot.c - CRC16/XMODEM and Redis Cluster key slots with hash tags.
 * Expected slots were read from redis-server 7.0's CLUSTER KEYSLOT. */
#include "slot.h"
#include "unit.h"

/* The CRC bit by bit, straight from its definition, to check the table. */
static uint16_t bitwise_crc16(const unsigned char *p, size_t len)
{
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)(p[i] << 8);
        for (int bit = 0; bit < 8; bit++)
            crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
    }
    return crc;
}

static uint16_t slot_of(const char *key)
{
    return slot_for_key(key, strlen(key));
}

static void test_crc16_check_value(void)
{
    CHECK(slot_crc16("123456789", 9) == 0x31C3);
    CHECK(slot_crc16("", 0) == 0);
    CHECK(slot_crc16(NULL, 0) == 0);
}

static void test_crc16_matches_bitwise(void)
{
    unsigned char buf[512];
    uint32_t x = 12345;

    for (int b = 0; b < 256; b++) {
        buf[0] = (unsigned char)b;
        CHECK(slot_crc16((const char *)buf, 1) == bitwise_crc16(buf, 1));
    }
    for (size_t i = 0; i < sizeof(buf); i++) {
        x = x * 1103515245u + 12345u;
        buf[i] = (unsigned char)(x >> 16);
    }
    for (size_t len = 0; len <= sizeof(buf); len += 37)
        CHECK(slot_crc16((const char *)buf, len) == bitwise_crc16(buf, len));
}

static void test_known_slots(void)
{
    static const struct {
        const char *key;
        uint16_t slot;
    } known[] = {
        {"foo", 12182},  {"bar", 5061},      {"123456789", 12739}, {"", 0},
        {"a", 15495},    {"user1000", 3443}, {"{", 4092},          {"}", 12090},
        {"}{", 12793},   {"{{", 7007},       {"a{b", 13340},       {"hello{world", 2258},
        {"{}", 15257},   {"{}foo", 9500},    {"foo{}", 5542},      {"{}{x}", 3257},
        {"{a}", 15495},  {"a}b{c}", 7365},   {"x{y}}", 12222},     {"{{}}", 4092},
    };
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
        if (slot_of(known[i].key) != known[i].slot) {
            fprintf(stderr, "slot of \"%s\": %u, want %u\n", known[i].key,
                    (unsigned)slot_of(known[i].key), (unsigned)known[i].slot);
            CHECK(0);
        }
    }
}

static void test_hash_tags(void)
{
    CHECK(slot_of("{user1000}.following") == 3443);
    CHECK(slot_of("{user1000}.followers") == 3443);
    CHECK(slot_of("{user1000}") == slot_of("user1000"));
    /* Only the first '{' and the first '}' after it count. */
    CHECK(slot_of("foo{bar}{zap}") == slot_of("bar"));
    CHECK(slot_of("foo{{bar}}zap") == 4015);
    CHECK(slot_of("foo{{bar}}zap") == slot_of("{bar"));
    CHECK(slot_of("{{}}") == slot_of("{"));
    CHECK(slot_of("x{y}}") == slot_of("y"));
}

static void test_empty_or_open_tags_hash_whole_key(void)
{
    CHECK(slot_of("foo{}{bar}") == 8363);
    CHECK(slot_of("foo{}{bar}") == (slot_crc16("foo{}{bar}", 10) & 16383));
    CHECK(slot_of("{}") == (slot_crc16("{}", 2) & 16383));
    CHECK(slot_of("{}{x}") != slot_of("x"));
    CHECK(slot_of("a{b") == (slot_crc16("a{b", 3) & 16383));
    CHECK(slot_of("}a{") == (slot_crc16("}a{", 3) & 16383));
}

static void test_binary_keys(void)
{
    /* Bytes after a NUL count; the tag may hold any byte. */
    CHECK(slot_for_key("\xff\x00{\x01}", 5) == 4129);
    CHECK(slot_for_key("\xff\x00{\x01}", 5) == slot_for_key("\x01", 1));
    CHECK(slot_for_key("a\0b", 3) != slot_for_key("a", 1));
    /* The length bounds the search: the '}' beyond it does not close. */
    CHECK(slot_for_key("{ab}", 3) == (slot_crc16("{ab", 3) & 16383));
    CHECK(slot_for_key("{", 0) == 0);
}

static void test_tagged_keys_share_a_slot(void)
{
    char key[32];
    uint16_t want = slot_of("order:42");

    for (int i = 0; i < 1000; i++) {
        int n = snprintf(key, sizeof(key), "{order:42}:item:%d", i);
        CHECK(slot_for_key(key, (size_t)n) == want);
    }
}

UNIT_MAIN("slot", {"crc16_check_value", test_crc16_check_value},
          {"crc16_matches_bitwise", test_crc16_matches_bitwise},
          {"known_slots", test_known_slots}, {"hash_tags", test_hash_tags},
          {"empty_or_open_tags_hash_whole_key", test_empty_or_open_tags_hash_whole_key},
          {"binary_keys", test_binary_keys},
          {"tagged_keys_share_a_slot", test_tagged_keys_share_a_slot})
