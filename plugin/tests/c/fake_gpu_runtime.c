/*
 * Stands in for the NVIDIA driver library (built as libcuda.so.1) so a test can run the plugin in
 * a process where a GPU runtime is loadable, on a machine without one. It reports no device, so
 * the plugin's probe must find it unusable (and must not panic on the symbols it lacks).
 */
int cuInit(unsigned int flags) {
    (void)flags;
    return 100; /* CUDA_ERROR_NO_DEVICE */
}
