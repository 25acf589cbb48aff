#!/usr/bin/env bash
# Packs both legs' site folders for the H200 machine, in the project root, into `.gpu/` (ignored by
# git). The working tree that travels with every call is now about 24.5 MiB, so a call has room for
# about 39 MiB more: the two legs' wheels (658 MB as wheels, deflate-compressed) are installed here
# with pip --target, and the two site folders go into one tar compressed with zstd's long-range
# mode (shared files and near-identical kernels between 0.24.0 and 0.26.0 compress against each
# other): 327 MB, ten parts of 33 MiB. site-0.26.0 comes first in the tar, and its files end
# within the first seven parts, so 0.26.0 can be unpacked and measured while 0.24.0's parts travel.
# On the machine (which has no zstd binary: carry one, `.gpu/zb/zstd`, or the zstandard wheel):
#   cat parts/p0[0-6] | zstd -dc --long=31 | tar xvf - | grep -m1 '^site-0.24.0/'   (0.26.0 only)
#   cat parts/p0*     | zstd -dc --long=31 | tar xf - site-0.24.0                    (0.24.0)
set -eu
G=.gpu
P="--platform manylinux_2_31_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
   --platform manylinux_2_26_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
   --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_5_x86_64 --platform any"
rm -rf "$G/site" "$G/p" && mkdir -p "$G/site" "$G/p"
for v in 0.26.0 0.24.0; do
  # The wheel folders hold each leg's verified list (.gpu/req-$v.txt), downloaded for Python 3.12.
  .venv/bin/python -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --target "$G/site/site-$v" --python-version 3.12 --implementation cp --only-binary=:all: $P "$G/w-$v"/*.whl
done
(cd "$G/site" && tar cf - site-0.26.0 site-0.24.0) | zstd -T2 -12 --long=31 -q -o "$G/sites.tar.zst"
split -b 33M -d -a 2 "$G/sites.tar.zst" "$G/p/p"
sha256sum "$G/sites.tar.zst" > "$G/p/SHA256"
# The project snapshot the driver runs from: HEAD with its .git (so each record names the commit),
# without results/ (data, and too large to travel beside a part).
rm -rf /tmp/h200-snap && git clone -q --depth 1 "file://$PWD" /tmp/h200-snap
tar czf "$G/repo.tgz" -C /tmp/h200-snap --exclude=./results .
ls -l "$G/p" "$G/repo.tgz"
