#!/usr/bin/env bash
# The wheels of the hackathon's DALI loader (`train_unet.py --loader dali`) for a GPU host
# without network (Python 3.12, x86_64), in parts small enough to carry: the device machine
# takes 64 MiB a call, and DALI's wheel is 199 MB.
#
#   benches/train/dali_wheels.sh fetch     # here: the wheels, cut into .dali/part-1 ... part-N
#   benches/train/dali_wheels.sh keep      # there, in each call that carried a part: the parts
#                                          # copied out of the working tree, into STASH
#                                          # (default /tmp/zarrpipe-dali-parts)
#   benches/train/dali_wheels.sh install   # there, once every part has come: joined (from
#                                          # .dali and STASH), then installed into SITE
#                                          # (default /tmp/site, as benches/train/run.sh
#                                          # installs the other wheels)
#
# Carry one part a call (`carry: [".dali/part-1"]`, then part-2, ...) while the machine stays
# warm, and begin each of those calls with `keep`: a call that carries `.dali/part-2` replaces
# the `.dali` folder there, so part-1 is gone unless it was kept (H100, 2026-11-27). Only what
# DALI imports comes: its image codec libraries (nvimgcodec, nvjpeg, nvtiff, its own libnvcomp)
# are left out, as the loader decodes no images. typing-extensions (optree's) comes with the
# peers' wheels.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
dest=$root/.dali
part_mb=${PART_MB:-50}
site=${SITE:-/tmp/site}
stash=${STASH:-/tmp/zarrpipe-dali-parts}
wheels=(nvidia-dali-cuda130==2.4.0 astunparse==1.6.3 gast==0.7.0 libcst==1.9.0 makefun==1.16.0
        nvtx==0.2.17 optree==0.20.0 six==1.17.0)

case "${1:-}" in
  fetch)
    grep -qx '/.dali/' "$root/.git/info/exclude" 2>/dev/null || echo '/.dali/' >>"$root/.git/info/exclude"
    rm -rf "$dest" && mkdir -p "$dest/wheels"
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
      --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
      -d "$dest/wheels" "${wheels[@]}" >&2
    # One archive of every wheel, cut into parts; the parts are joined on the host.
    (cd "$dest/wheels" && tar -cf "$dest/wheels.tar" ./*.whl)
    (cd "$dest" && split -b "${part_mb}M" -d -a 1 wheels.tar wheels.tar.)
    for piece in "$dest"/wheels.tar.?; do
      n=$((${piece##*.} + 1))
      mkdir -p "$dest/part-$n" && mv "$piece" "$dest/part-$n/"
    done
    (cd "$dest" && sha256sum wheels.tar >part-1/wheels.tar.sha256)
    rm -rf "$dest/wheels" "$dest/wheels.tar"
    ls -l "$dest"/part-* >&2
    echo "carry .dali/part-1 ... .dali/part-$(ls -d "$dest"/part-* | wc -l), one a call" >&2
    ;;
  keep)
    found=0
    for part in "$dest"/part-*; do
      [ -d "$part" ] || continue
      mkdir -p "$stash" && cp -r "$part" "$stash"/ && found=1
    done
    [ "$found" = 1 ] || { echo "no part in $dest to keep (carry .dali/part-N)" >&2; exit 2; }
    echo "kept in $stash: $(cd "$stash" && ls -d part-* | tr '\n' ' ')" >&2
    ;;
  install)
    # In the order they were cut (wheels.tar.0, .1, ...), each once, from .dali or the stash.
    parts=$(for f in "$dest"/part-*/wheels.tar.? "$stash"/part-*/wheels.tar.?; do if [ -e "$f" ]; then echo "${f##*.} $f"; fi; done | sort -n -u -k1,1 | cut -d' ' -f2-)
    [ -n "$parts" ] || { echo "no parts in $dest or $stash (carry .dali/part-N, then keep)" >&2; exit 2; }
    sums=$(ls "$dest"/part-1/wheels.tar.sha256 "$stash"/part-1/wheels.tar.sha256 2>/dev/null | head -n 1 || true)
    [ -n "$sums" ] || { echo "part-1 (with wheels.tar.sha256) has not come" >&2; exit 2; }
    joined=$(mktemp -d)
    cat $parts >"$joined/wheels.tar"
    if ! (cd "$joined" && sha256sum -c --quiet "$sums"); then
      echo "the joined parts are not the archive that was cut (a part missing or twice?)" >&2
      exit 1
    fi
    tar -xf "$joined/wheels.tar" -C "$joined"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$site" "$joined"/*.whl
    rm -rf "$joined"
    echo "installed into $site: export PYTHONPATH=$site" >&2
    ;;
  *)
    echo "usage: $0 fetch|keep|install" >&2
    exit 2
    ;;
esac
