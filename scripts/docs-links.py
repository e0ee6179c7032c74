#!/usr/bin/env python3
"""Every relative link in the project's Markdown resolves: to a file that exists and, where it
names one, to a heading of that file (GitHub's anchors); and every `docs/NAME.md` named in code
quotes exists: pages move, and a link left behind is a dead end for the reader. Exits 1 and
names each broken link."""

import functools
import glob
import os
import re
import sys

FENCED = re.compile(r"```.*?```", re.S)
LINK = re.compile(r"\]\(([^)\s]+)\)")
QUOTED_DOC = re.compile(r"`(docs/[\w.-]+\.md)`")
HEADING = re.compile(r"^#+ (.*)$", re.M)


def anchor(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors_of(path):
    return {anchor(h) for h in HEADING.findall(prose(path))}


@functools.cache
def prose(path):
    with open(path, encoding="utf-8") as f:
        return FENCED.sub("", f.read())


def markdown_files():
    patterns = ["*.md", "docs/*.md", "benches/**/*.md", "examples/**/*.md", "python/**/*.md"]
    return sorted({p for pattern in patterns for p in glob.glob(pattern, recursive=True)})


def broken_links(path):
    text = prose(path)
    for match in LINK.finditer(text):
        target = match.group(1)
        if re.match(r"[a-z]+:", target):
            continue  # a URL: not checked offline
        file_part, _, fragment = target.partition("#")
        resolved = (
            os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
        )
        if not os.path.exists(resolved):
            yield f"{path}: ({target}): no file {resolved}"
        elif fragment and resolved.endswith(".md") and fragment not in anchors_of(resolved):
            yield f"{path}: ({target}): no heading #{fragment} in {resolved}"
    for match in QUOTED_DOC.finditer(text):
        if not os.path.exists(match.group(1)):
            yield f"{path}: `{match.group(1)}`: no such file"


def main():
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    files = markdown_files()
    broken = [line for path in files for line in broken_links(path)]
    for line in broken:
        print(line)
    print(f"docs-links: {len(files)} Markdown files, {len(broken)} broken links")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
