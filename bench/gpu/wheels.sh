# Sourced by the device scripts under bench/gpu/: install_wheels puts the peers' wheels carried in
# .whl/ (cuDNN frontend; FlashInfer 0.6.0 with apache-tvm-ffi and torch-c-dlpack-ext) into /tmp/site
# and onto PYTHONPATH. The device has no network; its image has the rest of what they need.
install_wheels() {
    if ls .whl/*.whl >/dev/null 2>&1; then
        if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
            .whl/*.whl; then
            export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
        else
            echo "the wheels under .whl/ did not install: peers from them will be reported as unavailable"
        fi
    else
        echo "no wheels under .whl/: cuDNN ragged and FlashInfer will be reported as unavailable"
    fi
}
