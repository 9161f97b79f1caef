"""Exceptions qgemm raises besides ValueError/TypeError for bad arguments."""


class QgemmError(RuntimeError):
    """Base of qgemm's runtime errors."""


class CudaError(QgemmError):
    """A CUDA driver call failed; the message names the call and the error."""


class NoGpuError(CudaError):
    """This machine has no usable GPU or CUDA driver."""


class KernelUnavailableError(QgemmError):
    """A kernel is neither prebuilt for this GPU nor buildable here (no nvcc)."""
