// Builds the Studio bundle into ../src/tensorsketch/canvas/studio/static/ (committed, so
// `pip install` needs no Node). `node build.mjs --check` builds into memory and fails when the
// committed files differ from a fresh build. The font (Virgil, SIL OFL) and its licence live
// in static/ and are not touched by the build.
import { readFileSync, writeFileSync, mkdirSync, existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, "..", "src", "tensorsketch", "canvas", "studio", "static");
const check = process.argv.includes("--check");

const result = await esbuild.build({
  entryPoints: [join(here, "src", "main.ts"), join(here, "src", "style.css")],
  bundle: true,
  minify: true,
  format: "iife",
  target: ["es2020"],
  legalComments: "eof",
  write: false,
  outdir: out,
  entryNames: "app",
  external: ["Virgil-Regular.woff2"],
  logLevel: "warning",
});

const files = new Map();
for (const f of result.outputFiles) files.set(f.path.split(/[\\/]/).pop(), f.text);
files.set("index.html", readFileSync(join(here, "src", "index.html"), "utf8"));

const stale = [];
for (const [name, text] of files) {
  const path = join(out, name);
  if (check) {
    const have = existsSync(path) ? readFileSync(path, "utf8") : null;
    if (have !== text) stale.push(name);
  } else {
    mkdirSync(out, { recursive: true });
    writeFileSync(path, text);
  }
}
for (const need of ["Virgil-Regular.woff2", "Virgil-OFL.md"]) {
  if (!existsSync(join(out, need))) stale.push(`${need} (missing)`);
}
if (check && stale.length) {
  console.error(`studio bundle is stale: ${stale.join(", ")} differ from a fresh build; run \`nox -s studio-build\` and commit static/.`);
  process.exit(1);
}
for (const [name, text] of files) console.log(`${check ? "ok" : "wrote"} ${name} ${(Buffer.byteLength(text) / 1024).toFixed(1)} KiB`);
