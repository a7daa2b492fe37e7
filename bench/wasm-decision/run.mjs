// Runs the wasm32-wasip1 build of wasm-decision in node's V8 (WASI preview 1):
//   node bench/wasm-decision/run.mjs target/wasm32-wasip1/profiling/wasm-decision.wasm [SECONDS]
import { readFile } from "node:fs/promises";
import { argv, exit } from "node:process";
import { WASI } from "node:wasi";

const [wasmPath, ...rest] = argv.slice(2);
if (!wasmPath) {
  console.error("usage: node run.mjs MODULE.wasm [SECONDS_PER_CASE]");
  exit(2);
}
const wasi = new WASI({ version: "preview1", args: ["wasm-decision", ...rest], env: {}, returnOnExit: true });
const module = await WebAssembly.compile(await readFile(wasmPath));
// The proxy-wasm ABI's imports are linked in (the router names ProxyHost) but never called:
// the cases run on the MockHost. Each stub throws, so a call would show at once.
const imports = wasi.getImportObject();
for (const { module: from, name, kind } of WebAssembly.Module.imports(module)) {
  if (kind === "function" && !imports[from]?.[name]) {
    imports[from] ??= {};
    imports[from][name] = () => {
      throw new Error(`host call ${from}.${name} in the harness`);
    };
  }
}
const instance = await WebAssembly.instantiate(module, imports);
exit(wasi.start(instance));
