#!/usr/bin/env bash
# The examples as a user builds them: Stratum installed into a fresh prefix
# (cmake --install), each example configured from its own directory with only
# that prefix, built, and run on 2 CPU ranks under mpirun for a few steps. The
# programs return from main without calling finalize(): mpirun must not
# complain. Then the package names the torch it needs when given another.
#   build_and_run.sh BUILD_DIR SOURCE_DIR MPIEXEC
set -euo pipefail
build=$1 source=$2 mpiexec=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/stratum_examples_XXXXXX")
trap 'rm -rf "$work"' EXIT
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

cmake --install "$build" --prefix "$work/prefix" >"$work/install.log" || { cat "$work/install.log"; exit 1; }
for example in train_module train_layer_stack; do
  echo "=== $example ==="
  cmake -S "$source/examples/$example" -B "$work/$example" "${generator[@]}" "${launcher[@]}" \
    -DCMAKE_PREFIX_PATH="$work/prefix" >"$work/$example.configure.log" 2>&1 ||
    { cat "$work/$example.configure.log"; exit 1; }
  cmake --build "$work/$example" >"$work/$example.build.log" 2>&1 || { cat "$work/$example.build.log"; exit 1; }
  out=$(timeout 300 "$mpiexec" --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none -np 2 \
          "$work/$example/$example" 40 2>&1) || { echo "$out"; echo "$example failed"; exit 1; }
  echo "$out"
  if grep -qi "finalize" <<<"$out"; then echo "$example: mpirun reports a rank that did not finalize"; exit 1; fi
  grep -q "^loss .* -> " <<<"$out" || { echo "$example: no final loss line"; exit 1; }
done

echo "=== another torch ==="
mkdir -p "$work/fake-torch"
cat >"$work/fake-torch/TorchConfig.cmake" <<'CMAKE'
set(Torch_FOUND TRUE)
CMAKE
cat >"$work/fake-torch/TorchConfigVersion.cmake" <<'CMAKE'
set(PACKAGE_VERSION "1.0.0")
set(PACKAGE_VERSION_COMPATIBLE TRUE)
CMAKE
if cmake -S "$source/examples/train_module" -B "$work/wrong-torch" "${generator[@]}" -DCMAKE_PREFIX_PATH="$work/prefix" \
     -DTorch_DIR="$work/fake-torch" >"$work/wrong.log" 2>&1; then
  echo "configured against torch 1.0.0 without complaint"; exit 1
fi
grep -q "Stratum was built with torch" "$work/wrong.log" || { cat "$work/wrong.log"; exit 1; }
grep -o "Stratum was built with torch[^;]*" "$work/wrong.log" | head -1
echo "examples: OK"
