"""The docs name only what exists, and what a node writes or reads is documented.

Read: README.md, docs/*.md and proto/*.md. A name is an `inline code` span outside fenced
blocks, an `ftis-node` line inside one, or a ```toml block. Its kind, and what it must match:

- file: a path (from a top folder of the repository or a package of `ftis_swarm`, or ending
  in .py .md .sh .yml .msgpack), with an optional `:Name.attr` or `::test_name`. A tracked
  file or folder, named from the root, from `ftis_swarm/`, or as the tail of a path; a bare
  `name.py` lies in the doc's own package (`HOME_PACKAGE`; a bare `test_*.py` in `tests/`),
  or anywhere for a doc without one; the `:Name` is defined there.
- module: `ftis_swarm.a.b[.Name]`, or a dotted span that starts with the name of a module
  of ftis_swarm or one of its classes: the tail of a module's name and what the module
  defines (`dht.publishing.NearestPeers`, `learning.score`; `client.gather`: a member of
  one of its classes), or `Class.member`.
- config key: a dotted span that starts with a config section (`learner.ftis.C`, or a
  key's tail, `wire.max_bytes`; `node.` is the experiment's NodeConfig), `--set key=value`,
  `FTIS_A__B`, `[section]` (or a pip extra), `key = "text"` or `true`/`false`, each key of
  a ```toml block (which also loads as a `NodeConfig`), and each row of a table with a
  "config key" column (its flag one of `join`'s).
- command: `ftis-node ...` or `bench <name> ...`, in a span or a fenced line: the command
  and every option are the typer app's; a span of bare `--flags` names options of some
  command, or of another tool (`FOREIGN`).
- code name: any other span that is one snake_case (with an underscore) or CamelCase
  identifier, maybe followed by `(`, `@...`, or a `<placeholder>`/`*` (then what precedes
  it starts a name or string): a name the code of ftis_swarm, tests or deploy defines or
  uses, or a string it holds (docstrings and comments do not count), a key of deploy's
  YAML or of docs' JSON, or another tool's (`FOREIGN`). A `ftis_...` name is a Prometheus
  metric `metrics/prometheus.py:metric_of` makes of a documented key. Math symbols
  (`pi_gen`, `kl_i`) and plain lowercase words (`ttl`) are not checked: they are words as
  often as names.

And the other way: every field of `NodeConfig` is documented (its docstring in
ftis_swarm/config.py, or its path or name in a span); every counter and gauge of the
swarm's `counters()` is in docs/swarm.md's Counters section; docs/method.md's Metrics
section names `core/ftis.py:METRIC_KEYS`; (slow) every key of a real round's record is in
docs/node.md's Metrics table.

A dated record (a table with a `date` column; a section whose heading holds a date
`YYYY-MM-DD` or follows a line `<!-- dated record -->`, down to the next heading of its level
or above) is checked for files and commands only: it tells what was measured then, and
what to open and run now.
"""

from __future__ import annotations

import ast
import re
import shlex
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "proto").glob("*.md"))]
HOME_PACKAGE = {"swarm.md": "ftis_swarm/swarm/", "node.md": "ftis_swarm/node/", "rollout.md": "ftis_swarm/rollout/",
                "tasks.md": "ftis_swarm/tasks/", "models.md": "ftis_swarm/models/"}
TOP_FOLDERS = ("ftis_swarm/", "tests/", "docs/", "deploy/", "proto/", ".ci/")
FILE_SUFFIXES = (".py", ".md", ".sh", ".yml", ".msgpack")
RUN_FILE = re.compile(r"\.(jsonl?|log|png|url|txt|pt|toml|key|lock|puzzle|gguf|safetensors)$")  # a run's, a user's
NOT_CONFIG_KEYS = {"FTIS_DATA_DIR", "FTIS_CACHE_DIR", "FTIS_LOG_LEVEL"}  # settings of their own (docs/node.md)
MATH = re.compile(r"pi_\w+|[A-Za-z]{1,2}_[a-z]")  # docs/method.md's symbols: pi_gen, kl_i
FOREIGN = {  # names and flags of other tools, which the code does not spell out
    "--random-fully": "iptables", "--ctstate": "iptables", "--no-deps": "pip", "--restart": "docker",
    "--build-arg": "docker", "--logdir": "tensorboard", "ActivationThresh": "go-libp2p's autonat",
    "EnableRelayService": "go-libp2p", "EnableRelayV2": "go-libp2p", "libp2p_holepunch_outcomes_total": "p2pd",
    "malloc_trim": "glibc", "ru_maxrss": "getrusage", "DeviceMesh": "torch", "LlamaForCausalLM": "transformers",
    "add_adapter": "vLLM",
}
DATED_MARK = "<!-- dated record -->"
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


@dataclass(frozen=True)
class Span:
    text: str
    doc: Path
    line: int
    dated: bool
    section: str = ""

    def __str__(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}: `{self.text}`"


@cache
def read_doc(doc: Path) -> tuple[list[Span], list[tuple[str, list[Span]]]]:
    """The doc's inline spans (fenced lines blanked; a span may cross a line break), and its fences:
    (language, one Span a line)."""
    prose, fences, where = [], [], []
    section, dated_level, marked, fence, dated_table = "", 0, False, None, None
    for n, line in enumerate(doc.read_text().splitlines(), 1):
        if fence is None and line.startswith("|"):  # a table with a date column records runs
            if dated_table is None:
                dated_table = "date" in [c.strip() for c in line.strip().strip("|").split("|")]
        else:
            dated_table = None
        head = re.match(r"(#+) (.*)", line) if fence is None else None
        if head:
            level = len(head.group(1))
            dated_level = 0 if dated_level and level <= dated_level else dated_level
            dated_level = level if not dated_level and (marked or DATE.search(head.group(2))) else dated_level
            section, marked = head.group(2), False
        marked = marked or line.strip() == DATED_MARK
        where.append((bool(dated_level or dated_table), section))
        if line.lstrip().startswith("```"):
            if fence is None:
                fence = (line.strip().strip("`"), [])
            else:
                fences.append(fence)
                fence = None
            prose.append("")
        elif fence is not None:
            fence[1].append(Span(line, doc, n, bool(dated_level), section))
            prose.append("")
        else:
            prose.append(line)
    text = "\n".join(prose)
    spans = []
    for m in re.finditer(r"(`+)(.+?)\1", text, re.S):
        n = text.count("\n", 0, m.start(2)) + 1
        spans.append(Span(" ".join(m.group(2).split()), doc, n, *where[n - 1]))
    return spans, fences


# --- what exists ----------------------------------------------------------------------------------


@cache
def tracked() -> tuple[frozenset[str], frozenset[str]]:
    """Files in git (added but not committed ones too) that are on disk, and their folders. Outside a git
    checkout (.ci/run copies the tracked files alone), every file but caches and hidden folders."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, text=True)
    if out.returncode == 0 and (ROOT / ".git").exists():
        files = {f for f in out.stdout.splitlines() if (ROOT / f).is_file()}
    else:
        files = {str(f.relative_to(ROOT)) for f in ROOT.rglob("*") if f.is_file() and not any(
                 part.startswith(".") and part != ".ci" or part == "__pycache__" or part.endswith(".egg-info")
                 for part in f.relative_to(ROOT).parts)}
    return frozenset(files), frozenset(str(p) for f in files for p in Path(f).parents if str(p) != ".")


@cache
def modules() -> dict[str, ast.Module]:
    return {f[:-3].replace("/", ".").removesuffix(".__init__"): ast.parse((ROOT / f).read_text())
            for f in sorted(tracked()[0]) if f.startswith("ftis_swarm/") and f.endswith(".py")}


def defined(node: ast.AST) -> set[str]:
    """What a module or class body defines (functions, classes, assignments, imports; a class's
    `self.x` too)."""
    names: set[str] = set()
    for s in getattr(node, "body", []) + getattr(node, "orelse", []) + getattr(node, "handlers", []):
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(s.name)
        elif isinstance(s, (ast.Assign, ast.AnnAssign)):
            names |= {n.id for t in getattr(s, "targets", [getattr(s, "target", None)]) for n in ast.walk(t)
                      if isinstance(n, ast.Name)}
        elif isinstance(s, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in s.names}
        elif isinstance(s, (ast.If, ast.Try, ast.ExceptHandler)):
            names |= defined(s)
    if isinstance(node, ast.ClassDef):
        names |= {t.attr for t in ast.walk(node) if isinstance(t, ast.Attribute) and isinstance(t.ctx, ast.Store)
                  and getattr(t.value, "id", "") == "self"}
    return names


@cache
def classes() -> dict[str, list[ast.ClassDef]]:
    out: dict[str, list[ast.ClassDef]] = {}
    for tree in modules().values():
        for c in tree.body:
            if isinstance(c, ast.ClassDef):
                out.setdefault(c.name, []).append(c)
    return out


def class_has(name: str, member: str, seen: frozenset = frozenset()) -> bool:
    """`member` is defined in class `name` of ftis_swarm, or in a base of it there."""
    for c in classes().get(name, []):
        bases = {getattr(b, "attr", getattr(b, "id", "")) for b in c.bases} - seen - {name}
        if member in defined(c) or any(class_has(b, member, seen | {name}) for b in bases):
            return True
    return False


def module_has(module: str, rest: list[str]) -> bool:
    if not rest:
        return True
    if f"{module}.{rest[0]}" in modules():
        return module_has(f"{module}.{rest[0]}", rest[1:])
    body = modules()[module]
    if rest[0] in defined(body):
        return len(rest) == 1 or class_has(rest[0], rest[1])
    return len(rest) == 1 and any(rest[0] in defined(c) for c in body.body if isinstance(c, ast.ClassDef))


def resolves(dotted: str) -> bool:
    """The tail of a module's name, then what it defines; or `Class.member`."""
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        tail = "." + ".".join(parts[:k])
        if any(("." + m).endswith(tail) and module_has(m, parts[k:]) for m in modules()):
            return True
    return parts[0] in classes() and class_has(parts[0], parts[1])


def names_a_module(dotted: str) -> bool:
    first = dotted.split(".")[0]
    return first in {m.rsplit(".", 1)[-1] for m in modules()} or first in classes()


@cache
def code_words() -> tuple[frozenset[str], frozenset[str]]:
    """Names the code of ftis_swarm, tests and deploy defines or uses (with modules', deploy's YAML keys and
    docs' JSON keys), and the strings it holds (not docstrings; an f-string's constant parts)."""
    names, strings, docs = set(), set(), set()
    trees = list(modules().values())
    for f in tracked()[0]:
        names.add(Path(f).stem)
        if f.endswith(".py") and f.startswith(("tests/", "deploy/")):
            trees.append(ast.parse((ROOT / f).read_text()))
        elif f.startswith("deploy/") and f.endswith(".yml"):
            names |= set(re.findall(r"^\s*([\w-]+):", (ROOT / f).read_text(), re.M))
        elif f.startswith("docs/") and f.count("/") == 1 and f.endswith(".json"):
            names |= set(re.findall(r'"(\w+)":', (ROOT / f).read_text()))
    for tree in trees:
        for n in ast.walk(tree):
            body = getattr(n, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
                docs.add(id(body[0].value))
            if isinstance(n, ast.Constant):
                if isinstance(n.value, str) and id(n) not in docs:
                    strings.add(n.value)
            elif isinstance(n, ast.alias):
                names |= set((n.asname or n.name).split("."))
            else:
                name = getattr(n, "id", None) or getattr(n, "attr", None) or getattr(n, "arg", None) or getattr(
                    n, "name", None)
                if isinstance(name, str):
                    names.add(name)
    return frozenset(names), frozenset(strings)


def in_code(name: str) -> bool:
    """`name` is in the code, or an f-string's start and a word of the code (`swarm_chosen`: f"swarm_{key}"
    and "chosen"); `rejected_<reason>`, `kl_*`: some name or string starts with what precedes."""
    names, strings = code_words()
    stem = re.split(r"[<*]", name)[0]
    if stem != name:
        return any(w.startswith(stem) for w in names | strings)
    built = any(name[:k + 1] in strings and name[k + 1:] in names | strings for k in range(len(name)) if name[k] == "_")
    return name in names or name in strings or name in FOREIGN or built


@cache
def config_keys() -> dict[str, bool]:
    """Every key of `NodeConfig` by path ("learner.ftis.C"), sections too: whether config.py documents it
    (an attribute docstring; a section, its class's docstring)."""
    from pydantic import BaseModel

    from ftis_swarm.config import NodeConfig

    sources = [ROOT / "ftis_swarm/config.py"] if (ROOT / "ftis_swarm/config.py").exists() else \
        sorted((ROOT / "ftis_swarm/config").glob("*.py"))
    documented = {(c.name, a.target.id) for source in sources for c in ast.parse(source.read_text()).body
                  if isinstance(c, ast.ClassDef)
                  for a, b in zip(c.body, c.body[1:]) if isinstance(a, ast.AnnAssign)
                  and isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant)}
    out: dict[str, bool] = {}

    def walk(model, prefix):
        for name, field in model.model_fields.items():
            out[prefix + name] = (model.__name__, name) in documented
            for sub in getattr(field.annotation, "__args__", ()) or (field.annotation,):
                if isinstance(sub, type) and issubclass(sub, BaseModel):
                    out[prefix + name] = bool(sub.__doc__)
                    walk(sub, prefix + name + ".")

    walk(NodeConfig, "")
    return out


def config_sections() -> set[str]:
    return {p.split(".")[i] for p in config_keys() for i in range(p.count("."))} | {"node"}


def is_config_key(dotted: str) -> bool:
    """A key's path or its tail (`wire.max_bytes`; `node.rounds`, the experiment's node); `swarm.relay_*`."""
    dotted = dotted.lower().removeprefix("node.")
    stem = dotted.removesuffix("*")
    return any(("." + p.lower()).endswith("." + dotted) or (stem != dotted and p.startswith(stem))
               for p in config_keys())


@cache
def cli() -> dict[tuple[str, ...], frozenset[str]]:
    """Every command of `ftis-node` by path (() the app itself), with its options."""
    import typer.main

    from ftis_swarm.cli.main import app

    out = {}

    def walk(cmd, path):
        out[path] = frozenset({o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"--help"})
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, path + (name,))

    walk(typer.main.get_command(app), ())
    return out


@cache
def prometheus_names() -> frozenset[str]:
    """The metrics `metric_of` makes of docs/node.md's Metrics table (a reason or source as `x`)."""
    from ftis_swarm.metrics import prometheus

    keys = {re.sub(r"<[^>]+>", "x", k) for k in metrics_table()}
    keys |= {f"{k}@x" for k in keys} | {p + r for p, _, rs in prometheus._REASON_COUNTS for r in rs or ("x",)}
    out = {"ftis_rounds_total"}
    for kind, name, _ in map(prometheus.metric_of, keys):
        out |= {name, name + "_total"} if kind != "gauge" else {name}
    return frozenset(out)


# --- the rules ------------------------------------------------------------------------------------


def is_file(text: str) -> bool:
    if re.search(r"[<>*\s]|\.\.\.|^[~$]", text):
        return False
    path = re.split(r"::|(?<=\.py):", text)[0]
    subpackages = {m.split(".")[1] for m in modules() if m.count(".")}
    return path.startswith(TOP_FOLDERS) or path.endswith(FILE_SUFFIXES) or (
        "/" in path.rstrip("/") and path.split("/")[0] in subpackages)


def file_fault(span: Span) -> str | None:
    path, _, test = span.text.partition("::")
    path, _, symbol = path.partition(".py:")
    path = (path + ".py" if symbol else path).rstrip("/")
    files, folders = tracked()
    if "/" in path:
        found = [f for f in files | folders if f == path or f.endswith("/" + path)]
    else:
        home = "tests/" if path.startswith("test_") else HOME_PACKAGE.get(span.doc.name, "")
        found = [f for f in files if f.startswith(home) and f.rsplit("/", 1)[-1] == path]
    if not found:
        return f"{span}: no such file" + (f" in {home}" if "/" not in path and home else "")
    if test and not any(re.search(rf"def {test}\b", (ROOT / f).read_text()) for f in found):
        return f"{span}: no {test} in {found[0]}"
    names = [f[:-3].replace("/", ".").removesuffix(".__init__") for f in found]
    if symbol and not any(module_has(n, symbol.split(".")[:2]) for n in names if n in modules()):
        return f"{span}: {found[0]} defines no {symbol}"
    return None


def command_words(text: str) -> list[str] | None:
    """The words after `ftis-node` (or `bench <name> ...` whole), or None when it names no command."""
    m = re.search(r"(?:^|[\s/])(?<!--name )ftis-node(?:\s+(.*))?$", text)  # not docker's container name
    rest = (m.group(1) or "") if m else (text if re.match(r"bench [a-z]", text) else None)
    if rest is None:
        return None
    try:
        return shlex.split(rest.split(" # ")[0])
    except ValueError:
        return rest.split()


def command_faults(words: list[str]) -> list[str]:
    """What of `ftis-node WORDS...` the app lacks: a command, or an option of the command named."""
    options, path, i = cli(), (), 0
    faults = []
    while i < len(words) and words[i].startswith("-"):  # the app's own: --log-level LEVEL, --version
        faults += [] if words[i] in options[()] else [f"ftis-node has no {words[i]}"]
        i += 2 if words[i] == "--log-level" else 1
    while i < len(words) and (path + (words[i],)) in options:
        path, i = path + (words[i],), i + 1
    group = any(p[:len(path)] == path and len(p) > len(path) for p in options)  # `bench` takes a name
    if i < len(words) and group and not words[i].startswith("-") and words[i][:1] not in "<.*":
        wanted = [w for w in re.split(r"\\?\|", words[i]) if w]
        return [f"no command {' '.join(path + (w,))!r}" for w in wanted if path + (w,) not in options]
    for w in words[i:]:
        flag = w.split("=")[0]
        if re.fullmatch(r"--[a-z][a-z0-9-]*|-[A-Z]", flag) and flag not in options[path]:
            faults.append(f"'ftis-node {' '.join(path)}' has no {flag}")
    return faults


def config_faults(text: str) -> list[str | None]:
    """One entry per config key the span names: None, or what is wrong."""
    out: list[str | None] = []
    for key in re.findall(r"--set\s+([\w.]+)=", text):
        if key.lower() != "key":
            out.append(None if is_config_key(key) else f"--set {key}: no such key")
    for env in re.findall(r"\bFTIS_[A-Z0-9_]*[A-Z0-9]", text):
        if env not in NOT_CONFIG_KEYS:
            key = env.removeprefix("FTIS_").lower().replace("__", ".")
            out.append(None if key in {k.lower() for k in config_keys()} else f"{env}: no key {key}")
    m = re.fullmatch(r"\[([\w.-]+)\](?: (\w+))?", text)
    if m:
        extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
        key = m.group(1) + (f".{m.group(2)}" if m.group(2) else "")
        out.append(None if key in config_keys() or key in extras else f"no section, key or extra {key}")
    m = re.fullmatch(r"([\w.]+) = (\"[^\"]*\"|true|false)", text)
    if m:
        out.append(None if is_config_key(m.group(1)) else f"{m.group(1)}: no such key")
    m = re.fullmatch(r"([a-z_]+(?:\.\w+)+\*?)(?:=\S+)?", text)
    if m and m.group(1).split(".")[0] in config_sections() and not re.search(r"\.v\d+$", text):  # ftis.body.v2
        ok = is_config_key(m.group(1)) or resolves(m.group(1).rstrip("*"))
        out.append(None if ok else f"{m.group(1)}: no such key")
    return out


def code_fault(text: str) -> str | None | bool:
    """False when `text` is no code name (above), else None or what is wrong."""
    m = re.fullmatch(r"([A-Za-z_]\w*)([<*@(].*)?", text)
    snake = m and m.group(1).islower() and "_" in (m.group(1) if "<" in text else m.group(1).strip("_"))
    if not m or MATH.fullmatch(m.group(1)) or not (snake or re.match(r"[A-Z][a-z]+[A-Z]", m.group(1))):
        return False
    name = text if m.group(2) and m.group(2)[0] in "<*" else m.group(1)
    name = m.group(1) + "@*" if m.group(2) and m.group(2)[0] == "@" and not in_code(name) else name
    if text.startswith("ftis_") and not re.match(r"ftis_swarm\b", text):  # ftis_<key>_by_peer{peer="<source>"}
        metric = re.compile(".+".join(map(re.escape, re.split(r"<[^>]+>", text.split("{")[0]))))
        return None if any(map(metric.fullmatch, prometheus_names())) else "no metric of metric_of"
    return None if in_code(name) else "named nowhere in the code"


@cache
def checked() -> list[tuple[str, str, str | None]]:
    """(kind, where, fault or None) for each name in the docs."""
    out = []
    for doc in DOCS:
        spans, fences = read_doc(doc)
        for s in spans:
            if is_file(s.text):
                out.append(("file", str(s), file_fault(s)))
                continue
            words = command_words(s.text)
            if words is not None:
                out.append(("command", str(s), "; ".join(f"{s}: {f}" for f in command_faults(words)) or None))
            elif s.text.startswith(("--", "... --")):
                options = set().union(*cli().values()) | set(FOREIGN) | code_words()[1]  # a script's argparse
                flags = re.findall(r"(?:^|\s)(--[a-z][a-z0-9-]*)", s.text)
                out += [("command", str(s), None if f in options else f"{s}: no command has {f}") for f in flags]
            if s.dated or RUN_FILE.search(s.text):
                continue
            for dotted in re.findall(r"\bftis_swarm(?:\.\w+)+", s.text):
                out.append(("module", str(s), None if resolves(dotted) else f"{s}: no module or name {dotted}"))
            dotted = re.match(r"[A-Za-z_][\w.]*\w", s.text)
            dotted = dotted.group() if dotted and "." in dotted.group() else ""
            if dotted and not dotted.startswith("ftis_swarm") and names_a_module(dotted) and (
                    dotted.split(".")[0] not in config_sections()):
                out.append(("module", str(s), None if resolves(dotted) else f"{s}: in no module of ftis_swarm"))
            out += [("config", str(s), f and f"{s}: {f}") for f in config_faults(s.text)]
            fault = code_fault(s.text)
            if fault is not False:
                out.append(("code", str(s), fault and f"{s}: {fault}"))
        for _, lines in fences:
            for s in joined(lines):
                words = command_words(s.text.strip().removeprefix("$ "))
                if words is not None and not s.text.lstrip().startswith("#"):
                    out.append(("command", str(s), "; ".join(f"{s}: {f}" for f in command_faults(words)) or None))
    return out


def joined(lines: list[Span]) -> list[Span]:
    """Fenced lines, each with its `\\` continuations."""
    out: list[Span] = []
    for s in lines:
        if out and out[-1].text.endswith("\\"):
            out[-1] = Span(out[-1].text[:-1] + " " + s.text.strip(), s.doc, out[-1].line, s.dated)
        else:
            out.append(Span(s.text.rstrip(), s.doc, s.line, s.dated))
    return out


# --- the tests ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["file", "module", "config", "command", "code"])
def test_every_name_in_the_docs_exists(kind):
    names = [(where, fault) for k, where, fault in checked() if k == kind]
    assert len(names) > 50, f"{len(names)} {kind} names: the parser misses them"
    faults = [fault for _, fault in names if fault]
    assert not faults, "\n".join(faults)


def test_every_toml_example_loads_and_every_flag_table_row_is_a_key():
    from ftis_swarm.config import NodeConfig

    faults, rows = [], 0
    for doc in DOCS:
        for lang, lines in read_doc(doc)[1]:
            if lang == "toml":
                try:
                    NodeConfig.model_validate(tomllib.loads("\n".join(s.text for s in lines)))
                except ValueError as exc:
                    faults.append(f"{lines[0]}: {exc}")
        header = None
        for n, line in enumerate(doc.read_text().splitlines(), 1):
            cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else None
            header = cells if header is None else header if cells else None
            if cells and header and "config key" in header and cells is not header and "---" not in line:
                flag, key = cells[header.index("flag")].strip("`").split()[0], cells[header.index("config key")]
                key, rows = (key.split("`")[1] if "`" in key else ""), rows + 1
                faults += [f"{doc.name}:{n}: join has no {flag}"] if flag not in cli()[("join",)] else []
                faults += [f"{doc.name}:{n}: no config key {key}"] if key and key not in config_keys() else []
    assert rows > 20
    assert not faults, "\n".join(faults)


def test_every_config_key_is_documented():
    """By its docstring in config.py, or by its path or name in a span of the docs."""
    spans = {s.text.split("=")[0].strip() for doc in DOCS for s in read_doc(doc)[0]}
    spans |= {w for doc in DOCS for s in read_doc(doc)[0] for w in re.findall(r"\w+(?:\.\w+)+", s.text)}
    undocumented = [p for p, doc in config_keys().items() if not doc and p not in spans
                    and p.rsplit(".", 1)[-1] not in spans]
    assert len(config_keys()) > 100
    assert not undocumented, undocumented


def swarm_counters() -> set[str]:
    """`SwarmCounters._PLAIN` and its maps, and the gauges `SwarmClient.counters` adds (read from the source:
    importing the swarm imports hivemind)."""
    tree = modules()["ftis_swarm.swarm.counters"]
    plain = next(n.value for n in ast.walk(tree) if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "")
                 == "_PLAIN")
    snapshot = next(n for n in ast.walk(tree) if getattr(n, "name", "") == "snapshot")
    client = next(n for n in ast.walk(modules()["ftis_swarm.swarm.client"]) if getattr(n, "name", "") == "counters")
    gauges = {n.slice.value for n in ast.walk(client) if isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store)}
    maps = {k.value for n in ast.walk(snapshot) if isinstance(n, ast.Dict) for k in n.keys if k is not None}
    return set(ast.literal_eval(plain)) | gauges | maps


def test_every_swarm_counter_is_documented_in_docs_swarm_md():
    documented = {s.text for s in read_doc(ROOT / "docs/swarm.md")[0] if s.section.startswith("Counters")}
    counters = swarm_counters()
    assert len(counters) > 40
    missing = sorted(counters - documented)
    assert not missing, missing


def metrics_table() -> set[str]:
    """The keys in the first column of docs/node.md's Metrics table."""
    text = (ROOT / "docs/node.md").read_text().split("## Metrics", 1)[1].split("\n\n", 2)[1]
    rows = [row.split(" | ") for row in text.splitlines()[2:]]
    return {k for row in rows for k in re.findall(r"`([^`]+)`", row[0] if "`" in row[0] else row[1])}


def test_every_metric_in_the_table_is_in_the_code_and_method_md_names_metric_keys():
    table = metrics_table()
    assert len(table) > 60
    absent = sorted(k for k in table if not k.startswith("key@") and not in_code(re.sub("@.*", "@*", k)))
    assert not absent, absent
    metric_keys = next(ast.literal_eval(n.value) for n in modules()["ftis_swarm.core.ftis"].body
                       if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "METRIC_KEYS")
    in_method = {s.text for s in read_doc(ROOT / "docs/method.md")[0] if s.section == "Metrics"}
    missing = sorted(set(metric_keys) - in_method)
    assert not missing, missing


@pytest.mark.slow
def test_every_key_of_a_real_round_record_is_in_the_metrics_table(tmp_path):
    """One round of a real node (a tiny model, the loopback transport): each key it logs is documented."""
    from ftis_swarm.config import load_node_config
    from ftis_swarm.models.tiny import build_tiny_qwen2
    from ftis_swarm.node.daemon import Node
    from ftis_swarm.peers.loopback import LoopbackHub

    model = build_tiny_qwen2(tmp_path / "m", hidden_size=32, num_layers=1, seed=3)
    cfg = load_node_config(None, {"model": str(model), "run_dir": str(tmp_path / "a"), "rounds": 1,
                                  "prompts_per_round": 2, "sampling.group_size": 3, "sampling.max_new_tokens": 4,
                                  "round_deadline": 0.5, "learner.lr": 1e-3, "threads": 1})
    node = Node(cfg, swarm=LoopbackHub().member("A"))
    try:
        record = node.learn_published(node.publish_round(1)).record
    finally:
        node.close()
    table = metrics_table()
    table |= {f"{k}@<source>" for k in table if "@" not in k}  # docs/method.md's metrics, per source
    patterns = [re.compile(".+".join(map(re.escape, re.split(r"<[^>]+>", k)))) for k in table]
    assert len(record) > 40
    undocumented = sorted(k for k in record if not any(p.fullmatch(k) for p in patterns))
    assert not undocumented, ", ".join(undocumented)
