#!/usr/bin/env python3
"""Checks the layering of the ferrolm library: which of its top-level modules may import which.

Reads every `crate::`, `super::` and `self::` path in crates/ferrolm/src (in `use` declarations
and in code; comments and string literals are skipped), resolves it to the top-level module it
names, and checks it against RULES below. Exits 1 with one line per forbidden import
(`file:line: rule: path`), 0 when there is none.

    scripts/check-layers.py [SRC_DIR]        # default: crates/ferrolm/src

A module that has left the crate (format, tokenizer, chat and hub may become crates of their
own) must then be a re-export of that crate in lib.rs (`pub use ferrolm_format as format;`):
Cargo already forbids a crate to import ferrolm, so there is nothing left to check in src. A
ruled module that is neither in src nor re-exported is an error, never silently skipped.
"""

import os
import re
import sys

# ---------------------------------------------------------------------------------------------
# The rules: (module, kind, modules, why).
#   "only": the module imports nothing of the crate but these modules (and itself);
#   "not":  the module imports none of these. An entry `a::b` forbids module `a`'s submodule
#           `b` (and everything below it) while allowing the rest of `a`.
# `error` is where `crate::Error` and `crate::Result` live. Modules not listed may import
# anything.
RULES = [
    # Leaves, which may become crates of their own.
    ("format", "only", {"error"}, "format imports nothing else of the crate"),
    ("tokenizer", "only", {"error", "format"}, "tokenizer imports nothing else of the crate but format (GGUF vocabularies)"),
    ("chat", "only", {"error"}, "chat imports nothing else of the crate"),
    ("hub", "only", {"error"}, "hub imports nothing else of the crate"),
    # The operator types that the model, the KV cache and the backends share sit below all three.
    ("ops", "only", {"error"}, "ops imports nothing of the crate but error"),
    ("kv", "not", {"backend", "model", "session", "engine", "sequence", "decoder"},
     "kv does not import backend, model, session, engine, sequence, decoder"),
    ("backend", "not", {"model", "session", "engine", "sequence", "decoder"},
     "backend does not import model, session, engine, sequence, decoder"),
    ("model", "not", {"backend::cpu", "backend::opencl", "backend::cuda", "backend::gpu", "backend::compare"},
     "model uses backend only through the trait level (crate::backend::{Backend, ...}), "
     "never backend::cpu, backend::opencl, backend::cuda, backend::gpu or backend::compare"),
    ("model", "not", {"session", "engine", "sequence", "decoder"},
     "model does not import session, engine, sequence, decoder"),
    ("sampling", "not", {"model", "kv", "backend", "session", "engine"},
     "sampling does not import model, kv, backend, session, engine"),
    ("constrain", "not", {"model", "kv", "backend", "session", "engine"},
     "constrain does not import model, kv, backend, session, engine"),
    # The forward-pass interface and the generation core, below the two front ends.
    ("batch", "only", {"kv"}, "batch imports nothing of the crate but kv (sequence ids)"),
    ("sequence", "not", {"backend", "model", "decoder", "session", "engine"},
     "sequence (a KV sequence and the forward protocol) does not import backend, model, decoder, "
     "session, engine"),
    ("decoder", "not", {"backend", "kv", "sequence", "session", "engine"},
     "decoder (the per-token step) does not import backend, kv, sequence, session, engine"),
    # The two front ends of the core do not reach into each other.
    ("session", "not", {"engine"}, "session does not import engine"),
    ("engine", "not", {"session"}, "engine does not import session"),
]
# ---------------------------------------------------------------------------------------------

ROOT = "<crate root>"


def strip_code(text):
    """The text with comments, string and char literals blanked out (newlines kept)."""
    out = []
    i, n = 0, len(text)
    char_lit = re.compile(r"'(?:\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F_]+\}|.)|[^\\'\n])'")
    raw_str = re.compile(r'b?r(#*)"')

    def blank(s):
        return "".join(c if c == "\n" else " " for c in s)

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(blank(text[i:j]))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(blank(text[i:j]))
            i = j
        elif c in "rb" and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")) and raw_str.match(text, i):
            m = raw_str.match(text, i)
            end = text.find('"' + m.group(1), m.end())
            j = n if end < 0 else end + 1 + len(m.group(1))
            out.append(blank(text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(blank(text[i : j + 1]))
            i = j + 1
        elif c == "'" and char_lit.match(text, i):
            m = char_lit.match(text, i)
            out.append(blank(m.group(0)))
            i = m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def expand_use_tree(tree):
    """`a::{b, c::{d, e as f}, self}` -> ['a::b', 'a::c::d', 'a::c::e', 'a'] (aliases dropped)."""
    tree = re.sub(r"\s+", " ", tree).strip()

    def split_top(s):
        parts, depth, cur = [], 0, ""
        for ch in s:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        parts.append(cur)
        return [p.strip() for p in parts if p.strip()]

    def expand(prefix, s):
        s = s.strip()
        s = re.sub(r"\s+as\s+\w+$", "", s)
        brace = s.find("{")
        if brace < 0:
            path = s.replace(" ", "")
            if path == "self":
                return [prefix] if prefix else []
            return [prefix + "::" + path if prefix else path]
        head = s[:brace].replace(" ", "").rstrip(":")
        body = s[brace + 1 : s.rindex("}")]
        new_prefix = "::".join(p for p in (prefix, head) if p)
        res = []
        for part in split_top(body):
            res.extend(expand(new_prefix, part))
        return res

    return expand("", tree)


def module_of_file(src, path):
    rel = os.path.relpath(path, src)[: -len(".rs")].split(os.sep)
    if rel[-1] in ("mod", "lib"):
        rel = rel[:-1]
    return rel


def anchored_paths(code):
    """(line, path) for each `crate::`/`super::`/`self::` path of the stripped code, `use`
    trees expanded, with the inline modules (`mod x { ... }`) each sits in."""
    results = []
    # Inline modules: the brace depth at which each opens.
    mod_opens = {m.end() - 1: m.group(1) for m in re.finditer(r"\bmod\s+(\w+)\s*\{", code)}
    depth_at, stack, depth = [], [], 0
    inline_at = []
    for i, ch in enumerate(code):
        if ch == "{":
            if i in mod_opens:
                stack.append((mod_opens[i], depth))
            depth += 1
        elif ch == "}":
            depth -= 1
            if stack and stack[-1][1] == depth:
                stack.pop()
        inline_at.append(tuple(name for name, _ in stack))
        depth_at.append(depth)

    def line_of(pos):
        return code.count("\n", 0, pos) + 1

    used = []
    for m in re.finditer(r"\buse\s+((?:::)?[\w\s:{},*]+?);", code):
        used.append((m.start(), m.end()))
        tree = m.group(1)
        for path in expand_use_tree(tree):
            path = path.lstrip(":")
            if re.match(r"(\$?crate|super|self)\b", path):
                results.append((line_of(m.start()), inline_at[m.start()], path, "use " + tree.strip()))
    in_use = lambda pos: any(a <= pos < b for a, b in used)
    for m in re.finditer(r"(?<![\w:])\$?(?:crate|super|self)(?:\s*::\s*\w+)+", code):
        if in_use(m.start()):
            continue
        path = re.sub(r"\s+", "", m.group(0))
        results.append((line_of(m.start()), inline_at[m.start()], path, path))
    return results


def resolve(module, path):
    """The absolute segments (below the crate root) of `path` used in `module`, or None."""
    segs = path.lstrip("$").split("::")
    if segs[0] == "crate":
        return segs[1:]
    cur = list(module)
    if segs[0] == "self":
        return cur + segs[1:]
    while segs and segs[0] == "super":
        if not cur:
            return None
        cur.pop()
        segs = segs[1:]
    return cur + segs


def parse_lib(lib_text):
    """(modules declared in lib.rs, {re-exported name: module it comes from or None for another
    crate}, {module name: crate it re-exports})."""
    code = strip_code(lib_text)
    modules = set(re.findall(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", code, re.M))
    inline_mods = dict(re.findall(r"^\s*pub\s+mod\s+(\w+)\s*\{\s*pub\s+use\s+:?:?(\w+)::\*\s*;\s*\}", code, re.M))
    items, crates = {}, dict(inline_mods)
    for m in re.finditer(r"^\s*pub\s+use\s+([^;]+);", code, re.M):
        tree = m.group(1).strip()
        alias = re.fullmatch(r":?:?(\w+)\s+as\s+(\w+)", tree)
        if alias:
            crates[alias.group(2)] = alias.group(1)
            continue
        for path in expand_use_tree(tree):
            segs = path.lstrip(":").split("::")
            origin = segs[1] if segs[0] == "crate" and len(segs) > 1 else segs[0]
            items[segs[-1]] = origin if origin in modules else None
    for name in list(crates):
        if name in modules:
            del crates[name]  # a module of the crate, not a re-exported crate
    return modules, items, crates


def main():
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(repo, "crates", "ferrolm", "src")
    lib_path = os.path.join(src, "lib.rs")
    with open(lib_path, encoding="utf-8") as f:
        modules, root_items, crates = parse_lib(f.read())

    errors, notes = [], []
    ruled = sorted({r[0] for r in RULES})
    for mod in ruled:
        here = os.path.isdir(os.path.join(src, mod)) or os.path.isfile(os.path.join(src, mod + ".rs"))
        if mod in crates:
            notes.append(f"{mod}: a re-export of crate {crates[mod]} (a crate cannot import ferrolm)")
        elif not here:
            errors.append(
                f"{lib_path}: rule for module `{mod}`: there is no src/{mod}.rs or src/{mod}/, and lib.rs "
                f"does not re-export a crate as `{mod}` (e.g. `pub use ferrolm_{mod} as {mod};`)"
            )
        elif mod not in modules:
            errors.append(f"{lib_path}: rule for module `{mod}`: src has it, but lib.rs does not declare `mod {mod};`")

    def normalize(segs):
        """`segs` starting with the module it names (ROOT for an item of lib.rs itself), or None
        for an item of another crate re-exported at the root (`crate::GgmlType`)."""
        head = segs[0] if segs else ""
        if head in modules or head in crates:
            return segs
        if head in root_items:
            origin = root_items[head]
            return None if origin is None else [origin] + segs
        return [ROOT] + segs

    n_paths = 0
    for dirpath, _, files in sorted(os.walk(src)):
        for name in sorted(files):
            if not name.endswith(".rs"):
                continue
            path = os.path.join(dirpath, name)
            file_mod = module_of_file(src, path)
            if not file_mod:
                continue  # lib.rs: the root declares the modules
            top = file_mod[0]
            rules = [r for r in RULES if r[0] == top]
            with open(path, encoding="utf-8") as f:
                code = strip_code(f.read())
            for line, inline, used, text in anchored_paths(code):
                segs = resolve(file_mod + list(inline), used)
                if segs is None:
                    continue
                n_paths += 1
                segs = normalize(segs)
                if segs is None or segs[0] == top:
                    continue
                for _, kind, mods, why in rules:
                    if kind == "only":
                        bad = segs[0] not in mods
                    else:
                        bad = any(segs[: len(m.split("::"))] == m.split("::") for m in mods)
                    if bad:
                        rel = os.path.relpath(path, os.getcwd())
                        errors.append(f"{rel}:{line}: {why}: `{text}` names `crate::{'::'.join(segs)}`")

    for note in notes:
        print(f"check-layers: note: {note}")
    if errors:
        for e in errors:
            print(f"check-layers: error: {e}", file=sys.stderr)
        print(f"check-layers: {len(errors)} problem(s); the rules are at the top of {__file__}", file=sys.stderr)
        return 1
    print(f"check-layers: ok ({n_paths} crate paths in {src} follow {len(RULES)} rules)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
