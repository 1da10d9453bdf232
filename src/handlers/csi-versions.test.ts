import { test } from "node:test";
import assert from "node:assert/strict";
import { compareVersions, formatVersion, highestSupportedVersion, parseGenericVersion } from "./csi-versions.ts";

test("CSI versions parse as the kubelet's generic versions", () => {
  assert.deepEqual(parseGenericVersion("1.2.0").components, [1, 2, 0]);
  assert.deepEqual(parseGenericVersion("v1.10").components, [1, 10]);
  assert.deepEqual(parseGenericVersion("1.5.0-rc.1").components, [1, 5, 0], "what follows the numbers is ignored");
  assert.throws(() => parseGenericVersion("1"), /illegal version string "1"/);
  assert.throws(() => parseGenericVersion("one.two"), /could not parse "one.two" as version/);
  assert.throws(() => parseGenericVersion("01.2"), /illegal zero-prefixed version component "01"/);
});

test("the highest 1.x wins; majors above 1 are skipped; 0.x is refused", () => {
  assert.equal(formatVersion(highestSupportedVersion(["1.0.0", "1.10.0", "1.2.0"])), "1.10.0");
  assert.equal(formatVersion(highestSupportedVersion(["2.0.0", "1.3.0"])), "1.3.0");
  assert.equal(formatVersion(highestSupportedVersion(["nonsense", "1.1"])), "1.1");
  assert.throws(() => highestSupportedVersion(["0.3.0"]), /highest supported version reported by plugin is 0.3.0, must be v1.x/);
  assert.throws(() => highestSupportedVersion(["2.0.0"]), /could not find a highest supported version from versions \(\[2.0.0\]\)/);
  assert.throws(() => highestSupportedVersion(["x"]), /could not parse "x" as version/);
  assert.throws(() => highestSupportedVersion([]), /empty array/);
});

test("versions compare by component, a missing component counting as 0", () => {
  assert.equal(compareVersions(parseGenericVersion("1.2"), parseGenericVersion("1.2.0")), 0);
  assert.ok(compareVersions(parseGenericVersion("1.2.1"), parseGenericVersion("1.10")) < 0);
});
