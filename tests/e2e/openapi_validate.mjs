// Validates an OpenAPI document against the OpenAPI specification's own JSON Schema (3.0 or
// 3.1, by its "openapi" field), with @seriousme/openapi-schema-validator (Ajv) from
// tests/e2e/node_modules, installed by `make deps`. Run by test_openapi.py:
//
//   node openapi_validate.mjs docs/openapi.json
//
// Prints {"valid": true, "version": "3.1"} or the errors, as JSON; exits 0 only when valid.
import { Validator } from '@seriousme/openapi-schema-validator';

const validator = new Validator();
const result = await validator.validate(process.argv[2]);
console.log(JSON.stringify({ ...result, version: validator.version }, null, 1));
process.exit(result.valid ? 0 : 1);
