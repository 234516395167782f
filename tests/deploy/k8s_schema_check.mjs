// Validates Kubernetes manifests against the Kubernetes API schemas.
//
//   node k8s_schema_check.mjs NODE_MODULES_DIR MANIFESTS.json
//
// MANIFESTS.json holds a JSON array of objects, each {"source": "...",
// "object": {...}} (the YAML is parsed by the Python caller). Two checks per
// object:
//  1. the JSON-schema validator that the npm package `kubernetes-models`
//     (core and apps APIs, generated from the Kubernetes OpenAPI spec) or
//     `@kubernetes-models/prometheus-operator` (ServiceMonitor,
//     PrometheusRule, generated from the operator's CRDs) or
//     `@kubernetes-models/cert-manager` (Certificate, Issuer) ships for the
//     kind: types, enums, required fields, formats;
//  2. unknown fields, which those validators allow but the API server
//     rejects (kubectl --validate=strict): every field name is looked up in
//     the same packages' TypeScript declarations (.d.ts), which list each
//     type's properties.
// An apiVersion/kind that neither package knows is an error. Prints one line
// per object and exits 1 if any failed.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [nodeModules, manifestsPath] = process.argv.slice(2);
if (!nodeModules || !manifestsPath) {
  console.error("usage: node k8s_schema_check.mjs NODE_MODULES_DIR MANIFESTS.json");
  process.exit(2);
}

// ---- where a kind's model lives ------------------------------------------
function modulePathFor(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
  if (group === "monitoring.coreos.com") {
    return `@kubernetes-models/prometheus-operator/${group}/${version}/${kind}`;
  }
  if (group === "cert-manager.io") {
    return `@kubernetes-models/cert-manager/${group}/${version}/${kind}`;
  }
  return group ? `kubernetes-models/${group}/${version}/${kind}` : `kubernetes-models/${version}/${kind}`;
}

// Resolves "pkg/sub/path" or "./rel.js" (from `fromFile`) to a file with the
// given extension (".js" or ".d.ts"), node-style: nearest node_modules up.
function resolveSpec(spec, fromFile, ext) {
  let base;
  if (spec.startsWith(".")) {
    base = path.resolve(path.dirname(fromFile), spec.replace(/\.js$/, ""));
  } else {
    const parts = spec.split("/");
    const pkgLen = spec.startsWith("@") ? 2 : 1;
    const pkg = parts.slice(0, pkgLen).join("/");
    const rest = parts.slice(pkgLen).join("/");
    let dir = path.dirname(fromFile);
    let pkgDir = null;
    for (;;) {
      const candidate = path.join(dir, "node_modules", pkg);
      if (fs.existsSync(candidate)) { pkgDir = candidate; break; }
      const parent = path.dirname(dir);
      if (parent === dir) break;
      dir = parent;
    }
    if (!pkgDir) pkgDir = path.join(nodeModules, pkg);
    base = rest ? path.join(pkgDir, rest) : path.join(pkgDir, "index");
  }
  for (const candidate of [base + ext, path.join(base, "index" + ext)]) {
    if (fs.existsSync(candidate)) return candidate;
  }
  return null;
}

// ---- a small parser for the generated .d.ts files ---------------------------
// Types: {kind:"prim"} | {kind:"lit"} | {kind:"any"} | {kind:"array", of} |
// {kind:"map", of} | {kind:"object", props: {name: type}, parents: [ref]} |
// {kind:"union", of: [...]} | {kind:"ref", name, file}.
function tokenize(text) {
  text = text.replace(/\/\*[\s\S]*?\*\//g, " ").replace(/\/\/[^\n]*/g, " ");
  const re = /\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[A-Za-z_$][\w$]*|-?\d+(?:\.\d+)?|=>|[{}\[\]<>():;?|,=.&*])/y;
  const tokens = [];
  let m;
  re.lastIndex = 0;
  while (re.lastIndex < text.length && (m = re.exec(text))) tokens.push(m[1]);
  return tokens;
}

const fileCache = new Map();

function loadDts(file) {
  if (fileCache.has(file)) return fileCache.get(file);
  const info = { file, imports: {}, decls: {} };
  fileCache.set(file, info);
  const t = tokenize(fs.readFileSync(file, "utf8"));
  let i = 0;
  const peek = () => t[i];
  const next = () => t[i++];
  const expect = (s) => { if (t[i] !== s) throw new Error(`${file}: expected ${s} at token ${i}, got ${t[i]}`); i++; };
  const skipBalanced = (open, close) => {
    let depth = 0;
    do {
      const tok = next();
      if (tok === open) depth++;
      else if (tok === close) depth--;
    } while (depth > 0 && i < t.length);
  };

  function parseType() {
    if (peek() === "|") next();
    const members = [parseIntersection()];
    while (peek() === "|") { next(); members.push(parseIntersection()); }
    return members.length === 1 ? members[0] : { kind: "union", of: members };
  }
  function parseIntersection() {
    const first = parsePostfix();
    if (peek() !== "&") return first;
    while (peek() === "&") { next(); parsePostfix(); }
    return { kind: "any" };  // not used by the generated models
  }
  function parsePostfix() {
    let type = parsePrimary();
    while (peek() === "[" && t[i + 1] === "]") { next(); next(); type = { kind: "array", of: type }; }
    while (peek() === "[") { skipBalanced("[", "]"); type = { kind: "any" }; }  // T["x"]
    return type;
  }
  function parsePrimary() {
    const tok = next();
    if (tok === "(") { const inner = parseType(); expect(")"); return inner; }
    if (tok === "{") return parseObjectBody();
    if (/^["'\d-]/.test(tok)) return { kind: "lit" };
    if (["string", "number", "boolean", "null", "undefined", "true", "false"].includes(tok)) return { kind: "prim" };
    if (["any", "unknown", "object", "never"].includes(tok)) return { kind: "any" };
    if (tok === "import") {  // import("pkg").Name
      expect("("); next(); expect(")");
      while (peek() === ".") { next(); next(); }
      if (peek() === "<") skipBalanced("<", ">");
      return { kind: "any" };
    }
    if (tok === "Array" || tok === "ReadonlyArray") {
      expect("<"); const of = parseType(); expect(">");
      return { kind: "array", of };
    }
    if (tok === "Record") {
      expect("<"); parseType(); expect(","); const of = parseType(); expect(">");
      return { kind: "map", of };
    }
    let name = tok;
    while (peek() === ".") { next(); name += "." + next(); }
    if (peek() === "<") { skipBalanced("<", ">"); return { kind: "any" }; }  // generics
    return { kind: "ref", name, file };
  }
  // after "{": properties `"name"?: T;` or an index signature `[key: string]: T;`
  function parseObjectBody() {
    const props = {};
    let map = null;
    while (peek() !== "}") {
      if (peek() === "[") {
        next(); next(); expect(":"); parseType(); expect("]"); expect(":");
        map = parseType();
      } else {
        let name = next();
        if (/^["']/.test(name)) name = JSON.parse(name.replace(/^'|'$/g, '"'));
        if (peek() === "?") next();
        if (peek() === "(") { skipBalanced("(", ")"); expect(":"); parseType(); }  // method
        else { expect(":"); props[name] = parseType(); }
      }
      if (peek() === ";" || peek() === ",") next();
    }
    expect("}");
    if (map && Object.keys(props).length === 0) return { kind: "map", of: map };
    return { kind: "object", props, parents: [], open: Boolean(map) };
  }

  while (i < t.length) {
    const tok = next();
    if (tok === "import") {
      if (peek() === "type") next();
      if (peek() !== "{") { while (i < t.length && next() !== ";"); continue; }
      next();
      const names = [];
      while (peek() !== "}") {
        const imported = next();
        let local = imported;
        if (peek() === "as") { next(); local = next(); }
        names.push([imported, local]);
        if (peek() === ",") next();
      }
      next(); expect("from");
      const spec = JSON.parse(next().replace(/^'|'$/g, '"'));
      for (const [imported, local] of names) info.imports[local] = { spec, imported };
      if (peek() === ";") next();
    } else if (tok === "export" || tok === "declare") {
      continue;
    } else if (tok === "interface") {
      const name = next();
      if (peek() === "<") skipBalanced("<", ">");
      const parents = [];
      if (peek() === "extends") {
        next();
        for (;;) {
          let parent = next();
          while (peek() === ".") { next(); parent += "." + next(); }
          if (peek() === "<") skipBalanced("<", ">");
          parents.push({ kind: "ref", name: parent, file });
          if (peek() === ",") { next(); continue; }
          break;
        }
      }
      expect("{");
      const body = parseObjectBody();
      if (body.kind === "map") info.decls[name] = body;
      else { body.parents = parents; info.decls[name] = body; }
    } else if (tok === "type") {
      if (peek() === "{") {  // export type { A as B, ... };
        next();
        while (peek() !== "}") {
          const a = next();
          let b = a;
          if (peek() === "as") { next(); b = next(); }
          if (a !== b) info.decls[b] = { kind: "ref", name: a, file };
          if (peek() === ",") next();
        }
        next();
        if (peek() === "from") { next(); next(); }
      } else {
        const name = next();
        if (peek() === "<") skipBalanced("<", ">");
        expect("=");
        info.decls[name] = parseType();
      }
      if (peek() === ";") next();
    } else if (tok === "class" || tok === "function" || tok === "namespace" || tok === "module") {
      while (i < t.length && peek() !== "{" && peek() !== ";") next();
      if (peek() === "{") skipBalanced("{", "}"); else next();
    } else if (tok === "const" || tok === "let" || tok === "var") {
      while (i < t.length && next() !== ";");
    }
  }
  return info;
}

// Follows refs to a concrete type; null when it cannot be resolved.
function resolveRef(ref, depth = 0) {
  if (depth > 20) return null;
  const info = loadDts(ref.file);
  if (info.decls[ref.name]) {
    const decl = info.decls[ref.name];
    return decl.kind === "ref" ? resolveRef(decl, depth + 1) : decl;
  }
  const imp = info.imports[ref.name];
  if (!imp) return null;
  const target = resolveSpec(imp.spec, ref.file, ".d.ts");
  if (!target) return null;
  return resolveRef({ kind: "ref", name: imp.imported, file: target }, depth + 1);
}

// Properties of an object type including its parents; null if any parent is
// unknown (then unknown fields cannot be told apart and are not reported).
function allProps(obj, depth = 0) {
  if (depth > 20) return null;
  const props = { ...obj.props };
  for (const parent of obj.parents || []) {
    if (parent.name === "TypeMeta") { props.apiVersion ??= { kind: "prim" }; props.kind ??= { kind: "prim" }; continue; }
    const resolved = resolveRef(parent);
    if (!resolved || resolved.kind !== "object") return null;
    const inherited = allProps(resolved, depth + 1);
    if (!inherited) return null;
    Object.assign(props, inherited);
  }
  return props;
}

function checkFields(value, type, where, errors) {
  if (value === null || value === undefined || !type) return;
  if (type.kind === "ref") return checkFields(value, resolveRef(type), where, errors);
  if (type.kind === "union") {
    const objectMember = type.of.map((m) => (m.kind === "ref" ? resolveRef(m) : m))
      .find((m) => m && (m.kind === "object" || m.kind === "map" || m.kind === "array"));
    return checkFields(value, objectMember, where, errors);
  }
  if (type.kind === "array" && Array.isArray(value)) {
    value.forEach((item, k) => checkFields(item, type.of, `${where}[${k}]`, errors));
  } else if (type.kind === "map" && typeof value === "object") {
    for (const [k, v] of Object.entries(value)) checkFields(v, type.of, `${where}.${k}`, errors);
  } else if (type.kind === "object" && typeof value === "object" && !Array.isArray(value)) {
    const props = allProps(type);
    if (!props) return;
    for (const [k, v] of Object.entries(value)) {
      if (!(k in props)) {
        if (!type.open) errors.push(`${where}.${k}: unknown field (known: ${Object.keys(props).sort().join(", ")})`);
      } else {
        checkFields(v, props[k], `${where}.${k}`, errors);
      }
    }
  }
}

// ---- main ---------------------------------------------------------------
const manifests = JSON.parse(fs.readFileSync(manifestsPath, "utf8"));
let failed = 0;
for (const { source, object } of manifests) {
  const label = `${source}: ${object?.kind}/${object?.metadata?.name}`;
  const errors = [];
  if (!object || typeof object.apiVersion !== "string" || typeof object.kind !== "string") {
    errors.push("missing apiVersion or kind");
  } else {
    const spec = modulePathFor(object.apiVersion, object.kind);
    const jsFile = resolveSpec(spec, path.join(nodeModules, "x"), ".js");
    const dtsFile = jsFile && jsFile.replace(/\.js$/, ".d.ts");
    if (!jsFile || !fs.existsSync(dtsFile)) {
      errors.push(`no schema for apiVersion ${object.apiVersion} kind ${object.kind} (looked for ${spec})`);
    } else {
      const mod = await import(pathToFileURL(jsFile).href);
      const Model = mod[object.kind];
      try {
        new Model(object).validate();
      } catch (e) {
        errors.push(`schema: ${e.message}`);
      }
      const top = resolveRef({ kind: "ref", name: `I${object.kind}`, file: dtsFile });
      if (!top) errors.push(`cannot read the field declarations of ${object.kind} from ${dtsFile}`);
      else checkFields(object, top, object.kind, errors);
    }
  }
  if (errors.length) {
    failed++;
    console.log(`FAIL ${label}`);
    for (const e of errors) console.log(`     ${e}`);
  } else {
    console.log(`ok   ${label}`);
  }
}
console.log(`${manifests.length - failed} valid, ${failed} invalid`);
process.exit(failed ? 1 : 0);
