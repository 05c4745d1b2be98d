# Sourced by the device scripts under bench/gpu/: install_wheels puts the peers' wheels carried in
# .whl/ (cuDNN frontend; FlashInfer 0.6.0 with apache-tvm-ffi and torch-c-dlpack-ext; fa3-fwd, the
# FlashAttention-3 forward) into /tmp/site
# and onto PYTHONPATH. The device has no network; its image has the rest of what they need.
#
# FlashInfer JIT-compiles its fa3 module for each head-dim pair with nvcc on the device (about 95 s
# each, the largest part of a benchmark round). save_flashinfer_modules DEST packs the modules this
# machine compiled into DEST/flashinfer_aot.tar.xz; carried back as .carry/flashinfer_aot.tar.xz,
# install_wheels unpacks them into the installed package's data/aot/, where FlashInfer looks for
# ahead-of-time builds before it compiles (JitSpec.is_aot), so a later round loads them instead.
# They are FlashInfer's own build of its own sources, for this package version and sm_90a only.
FLASHINFER_AOT_CARRY=.carry/flashinfer_aot.tar.xz
install_wheels() {
    if ls .whl/*.whl >/dev/null 2>&1; then
        if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
            .whl/*.whl; then
            export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
            if [ -f "$FLASHINFER_AOT_CARRY" ] && [ -d /tmp/site/flashinfer ]; then
                mkdir -p /tmp/site/flashinfer/data/aot &&
                    tar -xJf "$FLASHINFER_AOT_CARRY" -C /tmp/site/flashinfer/data/aot &&
                    echo "FlashInfer modules from $FLASHINFER_AOT_CARRY:" \
                        "$(cd /tmp/site/flashinfer/data/aot && echo */*.so)"
            fi
        else
            echo "the wheels under .whl/ did not install: peers from them will be reported as unavailable"
        fi
    else
        echo "no wheels under .whl/: cuDNN ragged and FlashInfer will be reported as unavailable"
    fi
}
save_flashinfer_modules() { # DEST
    local ops
    ops=$(ls -d "${FLASHINFER_WORKSPACE_BASE:-$HOME}"/.cache/flashinfer/*/*/cached_ops 2>/dev/null | head -1)
    [ -n "$ops" ] || { echo "no FlashInfer modules were compiled on this machine"; return 0; }
    (cd "$ops" && ls -d */*.so >/dev/null 2>&1 && XZ_OPT=-T0 tar -cJf "$1/flashinfer_aot.tar.xz" -- */*.so) &&
        ls -l "$1/flashinfer_aot.tar.xz"
}
