import assert from "node:assert/strict";
import { test } from "node:test";
import { ListBudget } from "./list-budget.ts";

test("a list now and then never waits, nor two lists of a second in a row; back-to-back lists are held to a quarter of a core", () => {
  let now = 0;
  const budget = new ListBudget(() => now);
  assert.equal(budget.spend(5), 0);
  now += 10_000;
  assert.equal(budget.spend(1000), 0, "one big list");
  assert.equal(budget.spend(1000), 0, "and a second, within the burst");
  assert.equal(budget.spend(100), 400, "the next one at once waits four times its cost");
  now += 400;
  assert.equal(budget.spend(10), 40, "still paying off");
  now += 40 + 10_000;
  assert.equal(budget.spend(1500), 0, "back in credit after a quiet while");
});
