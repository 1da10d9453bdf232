/**
 * The policy validator, compiled from schema.ts at build time
 * (scripts/generate-policy.ts writes gen/policy-validator.ts, committed like
 * src/gen and checked current by CI and by validator.test.ts): a command
 * pays neither for loading ajv nor for compiling the schema.
 * It fills in every `default` of the schema as it checks, in place.
 *
 * @example
 * ```ts
 * const data = { version: 1, watch: [{ path: "/x" }] };
 * validatePolicyData(data); // [] and data.reconcile.resync === "10s"
 * ```
 */
import type { ErrorObject } from "ajv";
import { validate } from "./gen/policy-validator.ts";

interface CompiledValidator {
  (data: unknown): boolean;
  errors?: ErrorObject[] | null;
}

const compiled = validate as unknown as CompiledValidator;

/** ajv's errors for `data` ([] when valid); fills the schema's defaults into `data`. */
export function validatePolicyData(data: unknown): ErrorObject[] {
  return compiled(data) ? [] : [...(compiled.errors ?? [])];
}
