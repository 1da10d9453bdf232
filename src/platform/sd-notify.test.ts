import { test } from "node:test";
import assert from "node:assert/strict";
import { parseNotifySocket } from "./sd-notify.ts";

test("NOTIFY_SOCKET: absolute paths and @abstract names are used; anything else is refused with the reason", () => {
  assert.equal(parseNotifySocket(undefined), null);
  assert.equal(parseNotifySocket(""), null);
  assert.deepEqual(parseNotifySocket("/run/systemd/notify"), { address: "/run/systemd/notify" });
  assert.deepEqual(parseNotifySocket("@/org/freedesktop/systemd1/notify/123"), { address: "@/org/freedesktop/systemd1/notify/123" });
  assert.deepEqual(parseNotifySocket("run/notify"), { invalid: "expected an absolute path or an @abstract name" });
  assert.deepEqual(parseNotifySocket("vsock:2:1234"), { invalid: "expected an absolute path or an @abstract name" });
  assert.deepEqual(parseNotifySocket(`/${"a".repeat(107)}`), { invalid: "longer than 107 bytes" });
  assert.deepEqual(parseNotifySocket(`/${"a".repeat(106)}`), { address: `/${"a".repeat(106)}` });
  assert.deepEqual(parseNotifySocket("/run/notify\nREADY=1"), { invalid: "contains control characters" });
});
