# The steps a device call repeats, as shell functions: `source scripts/remote/device_call.sh` at the top of a
# call script run from the repository root on the GPU machine (the device tool's working copy), then call the ones
# it needs. The peers (QuACK, Liger) come staged in three folders that a call carries one at a time, since one
# call carries at most 64 MiB, the working tree included: .peersA and .peersB (the two parts of the CuTe DSL's
# compiler library), .peers2 (the wheels and the rest, with its install.sh); every part is kept in /tmp/peers until
# the call that installs them.
# The build comes carried as .labso/cur.so.xz (xz -T2 -c lab/_C.abi3.so > .labso/cur.so.xz here).
# A new checkout has none of these folders: after staging the peers (which writes .peers1/ir.so.xz and
# .peers2/), split the library in two here with `mkdir -p .peersA .peersB && split -n 2 .peers1/ir.so.xz /tmp/irpart.
# && mv /tmp/irpart.aa .peersA/ && mv /tmp/irpart.ab .peersB/`, and add /.labso/, /.peersA/, /.peersB/ to
# .git/info/exclude (with /.peers1/ and /.peers2/) so that the device tool copies them only when a call carries them.

# Every call's outputs go to $OUT, the device tool's folder (build/remote where it is unset), made here.
export OUT=${OUT:-build/remote}
mkdir -p "$OUT"

# Writes the card, driver and clocks to $OUT/gpu.txt (results go under results/<gpu>/ for the card that ran).
record_gpu() {
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/gpu.txt"
}

# Keeps whichever part of the peers' compiler library this call carries in /tmp/peers.
keep_peer_parts() {
  mkdir -p /tmp/peers
  local part
  for part in .peersA/irpart.aa .peersB/irpart.ab; do
    if [ -f "$part" ]; then cp "$part" /tmp/peers/; fi
  done
}

# Unpacks the carried build into lab/ (whole or not at all), or keeps the one an earlier call on this warm machine
# unpacked; either way writes its sha256 to $OUT/build.txt, so that a record says which build it ran.
unpack_build() {
  if [ -f .labso/cur.so.xz ]; then
    xz -dc .labso/cur.so.xz >lab/_C.abi3.so.part && mv lab/_C.abi3.so.part lab/_C.abi3.so || exit 1
  elif [ ! -f lab/_C.abi3.so ]; then
    echo "no build: carry .labso, or unpack it in an earlier call on this machine"; exit 1
  fi
  sha256sum lab/_C.abi3.so | tee "$OUT/build.txt"
}

# Installs the peers into /tmp/site once per machine (both parts kept in /tmp/peers, .peers2 carried), and puts
# them and the lab on PYTHONPATH.
install_peers() {
  local ir=/tmp/site/nvidia_cutlass_dsl/dsl_packages/cutlass/_mlir/_mlir_libs/_cutlass_ir.cu13.cpython-312-x86_64-linux-gnu.so
  if ! { [ -d /tmp/site/quack ] && [ -f "$ir" ]; }; then
    local part
    for part in /tmp/peers/irpart.aa /tmp/peers/irpart.ab .peers2/install.sh; do
      [ -f "$part" ] || { echo "the peers are not installed here and $part is missing: carry .peersA and .peersB" \
        "(each in an earlier call on this warm machine, or in this one), then .peers2"; exit 1; }
    done
    cat /tmp/peers/irpart.aa /tmp/peers/irpart.ab | xz -dc >/tmp/peers/ir.so || exit 1
    bash .peers2/install.sh >/dev/null || exit 1
  fi
  export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PWD PYTHONUNBUFFERED=1
}

# The lab on PYTHONPATH, output unbuffered (without the peers).
lab_env() {
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
}

# A call's usual start: the card recorded, the carried peers' parts kept, the build unpacked, the lab on PYTHONPATH.
begin_call() {
  record_gpu
  keep_peer_parts
  unpack_build
  lab_env
}

# The same start for a call that times or profiles the peers: the card recorded, the parts kept, the build unpacked,
# then the peers installed (once per machine) and on PYTHONPATH with the lab.
begin_peers_call() {
  record_gpu
  keep_peer_parts
  unpack_build
  install_peers
}
