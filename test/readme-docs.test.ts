/**
 * The README is the way in: its documentation table names every page of
 * docs/, and every page it links to exists, so a page added or renamed is
 * found from the README.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import { test } from "node:test";

const README = fs.readFileSync(
  new URL("../README.md", import.meta.url),
  "utf8",
);
const DOCS = new URL("../docs/", import.meta.url);

/** The pages the README's documentation table has a row for, by their link. */
function tableRows(): string[] {
  const table = README.slice(README.indexOf("## Documentation"));
  return [
    ...table.matchAll(/^\| \[docs\/([^\]]+\.md)\]\(docs\/\1\) \| [^|]+ \|$/gm),
  ].map((match) => match[1]);
}

test("the README's documentation table has a row for every page of docs/", () => {
  const pages = fs.readdirSync(DOCS).filter((name) => name.endsWith(".md"))
    .sort();
  assert.ok(pages.length >= 10, `found only ${pages.length} pages in docs/`);
  assert.deepEqual([...tableRows()].sort(), pages);
});

test("every docs/ page the README links to exists", () => {
  const linked = [...README.matchAll(/\]\(docs\/([^)#]+)(?:#[^)]*)?\)/g)].map((
    match,
  ) => match[1]);
  const missing = linked.filter((page) => !fs.existsSync(new URL(page, DOCS)));
  assert.deepEqual(
    missing,
    [],
    "the README links to pages docs/ does not have",
  );
});
