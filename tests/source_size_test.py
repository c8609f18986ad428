#!/usr/bin/env python3
"""Size limits of the source tree (the project's rule, issue 39), checked so that they stay met:

1. No file under src/ is longer than 600 lines.
2. No function under src/ is longer than 80 lines, counted from the line of its body's opening
   brace to the line of the matching closing brace (both included).

A function is found by a heuristic, not a parser: with comments, string and character literals
and preprocessor lines blanked, a brace opened at namespace or class level whose text since the
previous ';', '{' or '}' ends like a signature (a closing parenthesis, perhaps followed by
qualifiers, or a constructor's initializer list) opens a function body; lambdas and local classes
count towards the function they sit in. Namespaces, extern "C" blocks, classes, structs and unions
are looked into; anything else at that level (enums, initializers) is skipped.

Usage: source_size_test.py REPO_ROOT. Prints each violation; exits 1 if there is any.
"""
import pathlib
import re
import sys

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80
# The exceptions, each with its reason; remove an entry with the change that fixes it. Keyed by
# file and the function's qualified name as this script reports it.
EXEMPT = {
    # None today. An entry: ("src/path.cpp", "Class::function"): "why it may stay longer".
}
SOURCE_SUFFIXES = (".cpp", ".hpp", ".h", ".cc", ".cu", ".cuh")

# A head that ends a signature: ')' then qualifiers (const, noexcept, override, final, &, &&,
# a trailing return type), or a constructor's initializer list after ')'.
SIGNATURE_END = re.compile(
    r"\)(?:\s*(?:const|volatile|noexcept(?:\s*\([^()]*\))?|override|final|mutable|&&|&|"
    r"->\s*[\w:<>,*&\s]+?))*\s*$")
CONSTRUCTOR_INIT = re.compile(r"\)\s*:[^:]")
SCOPE_KEYWORD = re.compile(r"\b(namespace|extern)\b")
CLASS_KEYWORD = re.compile(r"\b(class|struct|union)\b")
ENUM_KEYWORD = re.compile(r"\benum\b")
NAME_BEFORE_PARAMS = re.compile(
    r"(operator\s*\(\s*\)|operator\s*[^\s(]+|[~\w:]+(?:\s*<[^()]*>)?)\s*\($")


def code_only(text):
    """The text with comments, literals and preprocessor lines blanked (line structure kept)."""
    blank = lambda m: re.sub(r"[^\n]", " ", m.group(0))  # noqa: E731
    out, i, n = [], 0, len(text)
    token = re.compile(r'/\*.*?\*/|//[^\n]*|R"([^(\s]*)\(.*?\)\1"|"(?:\\.|[^"\\\n])*"|'
                       r"'(?:\\.|[^'\\\n])*'|^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", re.S | re.M)
    for m in token.finditer(text):
        out.append(text[i:m.start()])
        out.append(blank(m))
        i = m.end()
    out.append(text[i:n])
    return "".join(out)


def function_name(head):
    """The qualified name of the function whose signature `head` ends with, for messages."""
    init = CONSTRUCTOR_INIT.search(head)
    if init:  # a constructor: its parameters end where its initializer list starts
        head = head[:init.start() + 1]
    depth = 0
    for i in range(len(head) - 1, -1, -1):
        c = head[i]
        if c == ")":
            depth += 1
        elif c == "(":
            depth -= 1
            if depth == 0:
                m = NAME_BEFORE_PARAMS.search(head[:i + 1])
                if m:
                    return re.sub(r"\s+", "", m.group(1))
    m = re.search(r"([~\w:]+)\s*\(", head)
    return m.group(1) if m else head.strip()[:40]


def functions(code):
    """Yields (name, first line, last line) of every function body at namespace or class level."""
    # The kind of each open brace: 'scope' (namespace, extern, class), 'body' or 'other'.
    stack = []
    head_start = 0
    body_start = None  # (name, line) of the function being read
    line = 1
    for i, c in enumerate(code):
        if c == "\n":
            line += 1
        elif c == ";" and (not stack or stack[-1] == "scope"):
            head_start = i + 1
        elif c == "{":
            if stack and stack[-1] != "scope":
                stack.append(stack[-1])  # inside a body or an initializer
                continue
            head = code[head_start:i]
            flat = " ".join(head.split())
            if SCOPE_KEYWORD.search(flat) and "(" not in flat:
                stack.append("scope")
            elif ENUM_KEYWORD.search(flat):
                stack.append("other")
            elif SIGNATURE_END.search(flat) or (CONSTRUCTOR_INIT.search(flat) and
                                                flat.endswith((")", "}"))):
                stack.append("body")
                body_start = (function_name(flat), line)
            elif CLASS_KEYWORD.search(flat):
                stack.append("scope")
            else:
                stack.append("other")  # an initializer: the declaration goes on after it
                continue
            head_start = i + 1
        elif c == "}":
            kind = stack.pop() if stack else "scope"
            if not stack or stack[-1] == "scope":
                if kind == "body" and body_start:
                    yield body_start[0], body_start[1], line
                    body_start = None
                # After an initializer (a default argument's {}), the declaration goes on.
                if kind != "other":
                    head_start = i + 1


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    problems, exempted, files, bodies = [], [], 0, 0
    used = set()  # the exemptions still needed
    for path in sorted((root / "src").rglob("*")):
        if not path.is_file():
            continue
        rel = path.relative_to(root).as_posix()
        text = path.read_text(errors="replace")
        files += 1
        lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        if lines > MAX_FILE_LINES:
            problems.append(f"{rel}: {lines} lines (at most {MAX_FILE_LINES})")
        if path.suffix not in SOURCE_SUFFIXES:
            continue
        for name, first, last in functions(code_only(text)):
            bodies += 1
            length = last - first + 1
            if length <= MAX_FUNCTION_LINES:
                continue
            message = f"{rel}:{first}: {name} is {length} lines (at most {MAX_FUNCTION_LINES})"
            if (rel, name) in EXEMPT:
                exempted.append(f"{message}: exempt ({EXEMPT[(rel, name)]})")
                used.add((rel, name))
            else:
                problems.append(message)
    # An exemption no longer needed goes, so that the list only ever shrinks.
    for rel, name in sorted(set(EXEMPT) - used):
        problems.append(f"{rel}: {name} is exempt but within the limits now (or gone): remove "
                        "its entry from EXEMPT")
    for p in exempted:
        print(p)
    for p in problems:
        print(p)
    if bodies == 0:  # the heuristic found nothing: it is broken, not the tree clean
        problems.append("no function bodies found under src/: the function finder is broken")
    print(f"{files} files and {bodies} functions under src/ checked: {len(problems)} violation(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
