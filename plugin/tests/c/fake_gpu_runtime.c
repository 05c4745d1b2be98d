/*
 * Stands in for the NVIDIA driver library (built as libcuda.so.1) so a test can run the plugin in
 * a process where a GPU runtime is loadable, on a machine without one. The plugin only probes that
 * the library loads; the entry point is here so the file is a plausible driver stub.
 */
int cuInit(unsigned int flags) {
    (void)flags;
    return 100; /* CUDA_ERROR_NO_DEVICE */
}
