#!/usr/bin/env python3
"""The layer rules of docs/architecture.md, checked on the source tree:

1. A file under src/ includes files of its own folder's layer or of layers below it, in the order
   of the "Layer order:" line of docs/architecture.md.
2. Outside src/device/cuda/ and the build's one registration point (src/device/builtin.cpp), no
   code names CUDA: no LOOM_HAVE_CUDA, no cuda*/Cuda*/CUDA* identifier (comments and strings do
   not count). The one exception is __CUDACC__ in base/dtype.hpp, which marks its scalar
   conversions as callable from any device compiler's kernels.
3. No thread-local state but the C API's per-thread state (src/api/thread_state.cpp): the
   workspaces of calls belong to their communicator.

Usage: layers_test.py REPO_ROOT. Prints each violation; exits 1 if there is any.
"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
doc = (root / "docs" / "architecture.md").read_text()
match = re.search(r"^Layer order:\s*(.+)$", doc, re.M)
if not match:
    print("docs/architecture.md has no 'Layer order:' line")
    sys.exit(1)
layers = [name.strip(" `.") for name in re.split(r"→|->", match.group(1))]
rank = {name: i for i, name in enumerate(layers)}

CUDA_ALLOWED = ("src/device/cuda/", "src/device/builtin.cpp")
THREAD_LOCAL_ALLOWED = ("src/api/thread_state.cpp",)
THREAD_LOCAL = re.compile(r"\bthread_local\b")
CUDA_WORD = re.compile(r"\bLOOM_HAVE_CUDA\b|\b(?:cuda|Cuda|CUDA)\w*|\b__CUDA\w*")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"/]+)/', re.M)


def code_only(text):
    """The text with comments and string literals blanked (line structure kept)."""
    text = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)


problems = []
sources = [p for p in sorted((root / "src").rglob("*"))
           if p.suffix in (".cpp", ".hpp", ".h", ".cu", ".cuh")]
for path in sources:
    rel = path.relative_to(root).as_posix()
    layer = rel.split("/")[1]
    if layer not in rank:
        problems.append(f"{rel}: folder '{layer}' is not in the layer order {layers}")
        continue
    text = path.read_text()
    for included in INCLUDE.findall(text):
        if included in rank and rank[included] > rank[layer]:
            problems.append(f"{rel}: includes {included}/ (layer '{included}' is above '{layer}')")
    if rel not in THREAD_LOCAL_ALLOWED:
        for number, line in enumerate(code_only(text).splitlines(), 1):
            if THREAD_LOCAL.search(line):
                problems.append(f"{rel}:{number}: thread_local outside the C API's thread state")
    if rel.startswith(CUDA_ALLOWED):
        continue
    for number, line in enumerate(code_only(text).splitlines(), 1):
        for word in CUDA_WORD.findall(line):
            if word == "__CUDACC__" and rel == "src/base/dtype.hpp":
                continue
            problems.append(f"{rel}:{number}: names CUDA outside src/device/cuda/: {word}")

for p in problems:
    print(p)
print(f"{len(sources)} files checked against layers {' -> '.join(layers)}: "
      f"{len(problems)} violation(s)")
sys.exit(1 if problems else 0)
