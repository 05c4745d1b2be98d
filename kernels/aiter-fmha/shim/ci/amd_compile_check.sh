#!/usr/bin/env bash
# Compiles and exercises the AMD pieces on a CPU-only Debian 12 machine (CI), with the toolchain
# that toolchain.sh sets up (no ROCm, no GPU):
#   1. kernels/aiter-fmha/hip/*.cu -> code objects for gfx942 and gfx950, with the options the engine gives
#      hipRTC (--offload-arch=<gcnArchName> -O3); checked: target, kernel symbol, nothing undefined;
#   2. AITER's asm-only libmha_fwd.so (mha_fwd.cu with FAV3_ON=1, ENABLE_CK=0: what
#      compile.py --api=fwd_v3 builds) from the vendored AITER subset, and the shim linked to it;
#      both link with --no-undefined against the fake HIP runtime, so the HIP symbols they import
#      are exactly the ones it defines;
#   3. shim_cases: the real shim + real libmha_fwd.so on the fake runtime, one process per case;
#   4. shim_bwd_cases: the shim's backward entry on the fake runtime against fake_mha_bwd.cpp, a
#      recording libmha_bwd.so compiled from AITER's real mha_bwd.h (ENABLE_CK=0); AITER's own
#      mha_bwd.cu is not built (it needs CK types the vendored subset lacks);
#   5. paged_kernels_replay: the paged and sink kernels' sources compiled as host C++ and run
#      block by block (the fake runtime executes no kernel), checked against the paged spec.
# The CK path cannot be built here: the vendored subset has no composable_kernel.
# Usage: amd_compile_check.sh REPO_ROOT AITER_DIR WORK
set -euo pipefail
repo="$(cd "${1:?usage: $0 REPO_ROOT AITER_DIR WORK}" && pwd)"
aiter="$(cd "${2:?AITER_DIR}" && pwd)"
work="${3:?WORK}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ARCHS=(gfx942 gfx950)

SECONDS=0
"$here/toolchain.sh" "$work"
echo "toolchain: ${SECONDS}s"
work="$(cd "$work" && pwd)"
# shellcheck source=/dev/null
source "$work/toolchain.env"
out="$work/build"
rm -rf "$out"
mkdir -p "$out/co" "$out/gen" "$out/lib"
resource="$(clang++ -print-resource-dir)"
hip=(-x hip --rocm-path="$ROCM_ROOT" -isystem "$ROCM_ROOT/include" -isystem "$resource")
offload=()
for a in "${ARCHS[@]}"; do offload+=("--offload-arch=$a"); done

echo "== 1. device kernels (hipRTC options) for ${ARCHS[*]}"
# hipRTC compiles with its own implicit declarations and no include path; -nogpuinc plus
# -include hip/hip_runtime.h is the nearest clang equivalent.
for src in "$repo"/kernels/aiter-fmha/hip/*.cu; do
  kernel="$(basename "$src" .cu)"
  for a in "${ARCHS[@]}"; do
    target="$a:sramecc+:xnack-" # what MI300X/MI355X report as gcnArchName
    co="$out/co/$kernel-$a.co"
    clang++ "${hip[@]}" -nogpuinc -include hip/hip_runtime.h --offload-arch="$target" -O3 \
      --cuda-device-only --no-gpu-bundle-output -Wall -Wextra -Werror -c "$src" -o "$co"
    notes="$(llvm-readelf --notes "$co")"
    found="$(sed -n "s/^amdhsa.target: *'\{0,1\}\([^']*\)'\{0,1\}\$/\1/p" <<<"$notes")"
    [ "$found" = "amdgcn-amd-amdhsa--$target" ] \
      || { echo "$co: target '$found', expected amdgcn-amd-amdhsa--$target" >&2; exit 1; }
    grep -q "^ *\.name: *$kernel\$" <<<"$notes" \
      || { echo "$co: kernel $kernel missing" >&2; exit 1; }
    undefined="$(llvm-nm --undefined-only "$co")"
    [ -z "$undefined" ] || { echo "$co: undefined symbols: $undefined" >&2; exit 1; }
    echo "ok $kernel for $target ($(stat -c %s "$co") bytes)"
  done
done

echo "device kernels: ${SECONDS}s so far"
echo "== 2. fake HIP runtime, AITER's asm-only libmha_fwd.so, the shim"
lib="$out/lib"
clang++ -std=c++17 -O1 -fPIC -shared -D__HIP_PLATFORM_AMD__=1 -isystem "$ROCM_ROOT/include" \
  -Wall -Wextra -Werror -Wl,-soname,libamdhip64.so "$here/fake_hip_runtime.cpp" -o "$lib/libamdhip64.so"
(cd "$aiter/hsa" && AITER_GPU_ARCHS="$(IFS=';'; echo "${ARCHS[*]}")" \
  "$CODEGEN_PYTHON" -W ignore codegen.py -m fmha_v3_fwd --output_dir "$out/gen")
printf '#define RAGGED_AITER_SHIM_GPU_TARGETS "%s"\n' "$(IFS=';'; echo "${ARCHS[*]}")" \
  > "$out/gen/ragged_aiter_shim_targets.h"
link=(-L"$lib" -lamdhip64 -no-hip-rt -Wl,--no-undefined -Wl,-rpath,'$ORIGIN')
clang++ "${hip[@]}" "${offload[@]}" -std=c++20 -O2 -fPIC -shared -DFAV3_ON=1 -DENABLE_CK=0 \
  -Wno-unused-result -I"$aiter/csrc/include" -I"$out/gen" "$aiter/csrc/cpp_itfs/mha_fwd.cu" \
  "${link[@]}" -o "$lib/libmha_fwd.so" &
aiter_build=$!
clang++ "${hip[@]}" --cuda-host-only -std=c++20 -O1 -DFAV3_ON=1 -DENABLE_CK=0 -Wall -Wextra \
  -Werror -I"$repo/kernels/aiter-fmha/shim" -I"$here" -isystem "$aiter/csrc/include" "$here/shim_cases.cpp" \
  -o "$out/shim_cases.o" -c &
driver_build=$!
wait "$aiter_build"
wait "$driver_build"
clang++ "${hip[@]}" "${offload[@]}" -std=c++20 -O2 -fPIC -shared -DFAV3_ON=1 -DENABLE_CK=0 \
  -Wall -Wextra -Wconversion -Werror -I"$repo/kernels/aiter-fmha/shim" -isystem "$aiter/csrc/include" \
  -I"$out/gen" "$repo/kernels/aiter-fmha/shim/ragged_aiter_shim.cpp" "$repo/kernels/aiter-fmha/shim/ragged_aiter_shim_bwd.cpp" \
  -L"$lib" -lmha_fwd "${link[@]}" -o "$lib/libragged_aiter_shim.so"
clang++ "$out/shim_cases.o" -L"$lib" -lmha_fwd -lamdhip64 -Wl,-rpath,"$lib" -o "$out/shim_cases"
# The backward: AITER's mha_bwd.cu needs CK types even for its asm path, so no libmha_bwd.so is
# built from the subset; the shim's backward entry runs against a recording stand-in compiled from
# the real mha_bwd.h (fake_mha_bwd.cpp), and a case driver checks what the shim hands it.
host=(-x hip --rocm-path="$ROCM_ROOT" -isystem "$ROCM_ROOT/include" -isystem "$resource" --cuda-host-only
  -std=c++20 -O1 -DENABLE_CK=0 -Wall -Wextra -Werror -I"$repo/kernels/aiter-fmha/shim" -I"$here" -isystem "$aiter/csrc/include")
clang++ "${host[@]}" -fPIC -shared "$here/fake_mha_bwd.cpp" "${link[@]}" -o "$lib/libfake_mha_bwd.so"
clang++ "${host[@]}" "$here/shim_bwd_cases.cpp" -L"$lib" -lamdhip64 -no-hip-rt -Wl,-rpath,"$lib" \
  -o "$out/shim_bwd_cases"
for sym in ragged_aiter_shim_abi_version ragged_aiter_shim_gpu_targets ragged_aiter_mha_fwd \
  ragged_aiter_mha_fwd_preflight ragged_aiter_shim_last_error ragged_aiter_shim_bwd_abi_version \
  ragged_aiter_mha_bwd_available ragged_aiter_mha_bwd; do
  nm -D --defined-only "$lib/libragged_aiter_shim.so" | grep -qw "$sym" \
    || { echo "$sym missing from the shim" >&2; exit 1; }
done
echo "ok libmha_fwd.so, libragged_aiter_shim.so (imports from HIP: $(nm -D --undefined-only \
  "$lib/libmha_fwd.so" "$lib/libragged_aiter_shim.so" | grep -o ' hip[A-Za-z0-9_]*' | sort -u | tr -d ' ' | tr '\n' ' '))"

echo "libraries: ${SECONDS}s so far"
echo "== 3. shim + libmha_fwd.so on the fake HIP runtime"
failed=0
cases=0
for c in $("$out/shim_cases" --list); do
  cases=$((cases + 1))
  "$out/shim_cases" "$lib/libragged_aiter_shim.so" "$aiter/hsa" "$c" 2>&1 | grep -v '^\[aiter' \
    || failed=$((failed + 1))
done
echo "== 4. the shim's backward entry on the fake HIP runtime and a recording libmha_bwd.so"
for c in $("$out/shim_bwd_cases" --list); do
  cases=$((cases + 1))
  "$out/shim_bwd_cases" "$lib/libragged_aiter_shim.so" "$lib/libfake_mha_bwd.so" "$c" 2>&1 \
    || failed=$((failed + 1))
done
echo "== 5. the paged and sink kernels replayed on the host"
cases=$((cases + 1))
clang++ -std=c++20 -O1 -pthread -Wall -Wextra -Werror -I"$repo/kernels/aiter-fmha/hip" \
  "$here/paged_kernels_replay.cpp" -o "$out/paged_kernels_replay"
"$out/paged_kernels_replay" || failed=$((failed + 1))
echo "shim cases: $((cases - failed)) passed, $failed failed (${SECONDS}s in all)"
[ "$failed" = 0 ]
