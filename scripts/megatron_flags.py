#!/usr/bin/env python3
"""List the command-line flags of Megatron-LM's megatron/training/arguments.py, statically.

Usage: scripts/megatron_flags.py MEGATRON_LM_CHECKOUT > tests/data/megatron_args.txt

Megatron-LM builds its parser from two sources, both read here without importing torch:
- literal `add_argument('--flag', ...)` calls in megatron/training/arguments.py;
- `ArgumentGroupFactory(ConfigClass, exclude=[...])`, which turns every dataclass field of the
  class (and its dataclass bases) into `--field-name` (megatron/training/argument_utils.py):
  a bool defaulting to True becomes `--no-field-name` and `--disable-field-name`; a field's
  `metadata={"argparse_meta": {"arg_names": [...]}}` replaces the names; `init=False` fields
  and excluded names are skipped.
"""
import ast
import os
import sys

root = sys.argv[1]
src_dir = os.path.join(root, "megatron")

classes = {}
for dirpath, _, files in os.walk(src_dir):
    for f in files:
        if f.endswith(".py"):
            p = os.path.join(dirpath, f)
            try:
                tree = ast.parse(open(p, encoding="utf-8").read())
            except SyntaxError:
                continue
            for node in tree.body:
                if isinstance(node, ast.ClassDef):
                    classes.setdefault(node.name, []).append(node)


def const_list(node, env):
    if isinstance(node, ast.Name) and node.id in env:
        node = env[node.id]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant)]
    return []


def fields_of(name, seen=None):
    seen = seen or set()
    if name in seen or name not in classes:
        return []
    seen.add(name)
    # Prefer a class that is a dataclass with annotated fields.
    node = max(classes[name], key=lambda c: sum(isinstance(b, ast.AnnAssign) for b in c.body))
    out = []
    for base in node.bases:
        if isinstance(base, ast.Name):
            out += fields_of(base.id, seen)
        elif isinstance(base, ast.Attribute):
            out += fields_of(base.attr, seen)
    for b in node.body:
        if not (isinstance(b, ast.AnnAssign) and isinstance(b.target, ast.Name)):
            continue
        ann = ast.unparse(b.annotation)
        if ann.startswith("ClassVar"):
            continue
        default = None
        init = True
        names = None
        v = b.value
        if isinstance(v, ast.Call) and ast.unparse(v.func).endswith("field"):
            for kw in v.keywords:
                if kw.arg == "default":
                    default = kw.value
                if kw.arg == "init" and isinstance(kw.value, ast.Constant):
                    init = kw.value.value
                if kw.arg == "metadata" and isinstance(kw.value, ast.Dict):
                    for k, mv in zip(kw.value.keys, kw.value.values):
                        if isinstance(k, ast.Constant) and k.value == "argparse_meta" and isinstance(mv, ast.Dict):
                            for k2, v2 in zip(mv.keys, mv.values):
                                if isinstance(k2, ast.Constant) and k2.value == "arg_names":
                                    names = [e.value for e in v2.elts]
        else:
            default = v
        out = [f for f in out if f[0] != b.target.id]
        out.append((b.target.id, ann, default, init, names))
    return out


args_py = os.path.join(src_dir, "training", "arguments.py")
tree = ast.parse(open(args_py, encoding="utf-8").read())
flags = set()
for fn in ast.walk(tree):
    if not isinstance(fn, ast.FunctionDef):
        continue
    env = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            env[node.targets[0].id] = node.value
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call):
            continue
        fname = ast.unparse(node.func)
        if fname.endswith("add_argument"):
            for a in node.args:
                if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("--"):
                    flags.add(a.value)
        elif fname.endswith("ArgumentGroupFactory") and node.args:
            cls = ast.unparse(node.args[0]).split(".")[-1]
            exclude = set()
            for kw in node.keywords:
                if kw.arg == "exclude":
                    exclude = set(const_list(kw.value, env))
            fl = fields_of(cls)
            if not fl:
                print(f"warning: no fields for {cls}", file=sys.stderr)
            for name, ann, default, init, names in fl:
                if name in exclude or not init:
                    continue
                if names:
                    flags.update(names)
                elif ann.replace(" ", "") in ("bool", "Optional[bool]", "bool|None") and isinstance(default, ast.Constant) and default.value is True:
                    flags.add("--no-" + name.replace("_", "-"))
                    flags.add("--disable-" + name.replace("_", "-"))
                else:
                    flags.add("--" + name.replace("_", "-"))
for f in sorted(flags):
    print(f)
