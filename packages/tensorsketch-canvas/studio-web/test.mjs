// Runs the unit tests of the page's pure modules (test/*.test.ts) with Node's own test runner:
// esbuild (already the build's tool) bundles each test file with the source it imports into a
// temporary folder, and `node --test` runs the bundles. No DOM: only modules that take data and
// return data are tested here; the browser tests in ../tests/ drive the whole page.
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";

const here = dirname(fileURLToPath(import.meta.url));
const tests = readdirSync(join(here, "test")).filter((f) => f.endsWith(".test.ts")).sort();
if (!tests.length) {
  console.error("no test/*.test.ts files");
  process.exit(1);
}
const out = mkdtempSync(join(tmpdir(), "studio-web-tests-"));
try {
  await esbuild.build({
    entryPoints: tests.map((f) => join(here, "test", f)),
    bundle: true,
    platform: "node",
    format: "esm",
    target: ["node20"],
    outdir: out,
    outExtension: { ".js": ".mjs" },
    sourcemap: "inline",
    logLevel: "warning",
  });
  const bundles = tests.map((f) => join(out, f.replace(/\.ts$/, ".mjs")));
  const run = spawnSync(process.execPath, ["--enable-source-maps", "--test", ...bundles], { stdio: "inherit" });
  process.exitCode = run.status ?? 1;
} finally {
  rmSync(out, { recursive: true, force: true });
}
