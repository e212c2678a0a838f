// Writes src/schema.ts, the types of Chronomem's HTTP API, from its OpenAPI document:
//
//   npm run generate -- http://127.0.0.1:8765/openapi.json   # a running server
//   npm run generate -- openapi.json                         # or a file
//
// A second argument writes the types there instead (the drift test in
// tests/py/test_client_typescript.py writes to a temp file and compares). Relative paths
// are read from the directory npm was run in.
import { writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

import openapiTS, { astToString, COMMENT_HEADER } from "openapi-typescript";

const [source, output] = process.argv.slice(2);
if (!source) {
  console.error("usage: npm run generate -- <openapi.json URL or file> [output file]");
  process.exit(2);
}
const here = process.env.INIT_CWD ?? process.cwd();
const input = /^https?:\/\//.test(source) ? new URL(source) : pathToFileURL(resolve(here, source));
const target = output
  ? resolve(here, output)
  : fileURLToPath(new URL("../src/schema.ts", import.meta.url));

// defaultNonNullable off: a request field with a server-side default (k, fusion,
// dry_run, ...) stays optional for the caller instead of becoming required.
const ast = await openapiTS(input, { defaultNonNullable: false });
writeFileSync(target, COMMENT_HEADER + astToString(ast), "utf8");
