#!/usr/bin/env bash
# Download the peers' wheels (benches/peers/requirements.txt) into .whl/ of the repository, for a
# GPU host without network access (Python 3.12, x86_64). Run here, where pip reaches PyPI:
#
#   benches/peers/fetch_wheels.sh            # then carry .whl/ to the GPU host; run.sh installs it
#
# Every wheel is fetched with --no-deps: requirements.txt lists each dependency the host lacks.
# nvidia-libnvcomp-cu13 (30 MB, libnvcomp.so.6) is skipped when $NVCOMP_LIB, .device/libnvcomp.so.6,
# .device/bin/libnvcomp.so.6 or .device/bins.tar.xz's bin/libnvcomp.so.6 exists: zarrpipe's GPU path
# carries that library already and peers.py loads the nvCOMP Python bindings against it. FETCH_LIBNVCOMP=1 fetches the wheel anyway.
# Wheels in .whl/ that requirements.txt does not name are removed (two versions of one package
# would stop the install on the host).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
dest="$root/.whl"
mkdir -p "$dest"
grep -qx '/.whl/' "$root/.git/info/exclude" 2>/dev/null || echo '/.whl/' >>"$root/.git/info/exclude"

mapfile -t wanted < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$here/requirements.txt" | grep -v '^$')
# Where zarrpipe's GPU path carries libnvcomp.so.6 already, if it does.
carried=
for lib in "${NVCOMP_LIB:-}" "$root/.device/libnvcomp.so.6" "$root/.device/bin/libnvcomp.so.6"; do
  [ -n "$lib" ] && [ -e "$lib" ] && carried=$lib && break
done
if [ -z "$carried" ] && [ -e "$root/.device/bins.tar.xz" ]; then
  listing=$(tar -tJf "$root/.device/bins.tar.xz" 2>/dev/null || true)
  if grep -qx 'bin/libnvcomp.so.6' <<<"$listing"; then carried="$root/.device/bins.tar.xz (bin/libnvcomp.so.6)"; fi
fi
reqs=()
for req in "${wanted[@]}"; do
  if [[ $req == nvidia-libnvcomp-cu13==* && -n $carried && ${FETCH_LIBNVCOMP:-0} != 1 ]]; then
    echo "skipping $req: $carried is carried already (FETCH_LIBNVCOMP=1 fetches it anyway)" >&2
    continue
  fi
  reqs+=("$req")
done

# The download line of the device README (/work/.library/device/README.md, "Notes").
python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  -d "$dest" "${reqs[@]}"

# Keep exactly one wheel per requirement: drop any other file (an older pin, a removed package).
python3 - "$dest" "${reqs[@]}" <<'EOF'
import os, re, sys
dest, reqs = sys.argv[1], sys.argv[2:]
norm = lambda s: re.sub(r"[-_.]+", "_", s).lower()
keep = {(norm(r.split("==")[0]), r.split("==")[1]) for r in reqs}
for name in sorted(os.listdir(dest)):
    if not name.endswith(".whl"):
        continue
    dist, version = name.split("-")[:2]
    if (norm(dist), version) not in keep:
        os.remove(os.path.join(dest, name))
        print(f"removed {name} (not in requirements.txt)", file=sys.stderr)
missing = keep - {(norm(n.split("-")[0]), n.split("-")[1]) for n in os.listdir(dest) if n.endswith(".whl")}
if missing:
    sys.exit(f"missing wheels: {sorted(missing)}")
EOF

ls -l "$dest"/*.whl
echo "total: $(du -cb "$dest"/*.whl | tail -1 | cut -f1) bytes in $(ls "$dest"/*.whl | wc -l) wheels ($dest)"
