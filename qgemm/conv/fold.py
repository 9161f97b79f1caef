"""Stride folding (space-to-depth): a strided convolution over few input channels run as a stride-1
convolution over s_h * s_w times the channels.

A 7x7 stride-2 convolution of an RGB image (ResNet's first layer) gives the implicit GEMM a K of
7 * 7 * 3: either 49 filter taps of 3 (padded to 4) channels, each tap one 4-byte access per
output pixel and a whole 64-deep K step when the iterator walks taps, or the few-channels
iterator's packed (r, s, c) index, still 4-byte accesses. Folded, each pixel of the new input holds
an s_h x s_w block of the old one (4 x 3 = 12 channels, padded to 16), and the filter becomes 4x4
with stride 1: 16 taps of 16-byte channel rows, which the alignment-16 (and Sm90) kernels read.

The geometry, per dimension (stride s, filter k, padding p, output extent P):

    front  = ceil(p / s) * s      rows of padding materialized before the image, a multiple of s so
                                  the image starts on a block boundary
    shift  = front - p            zero filter taps prepended, so output o's first tap stays at
                                  image row o * s - p
    k'     = ceil((k + shift) / s)  the folded filter
    H'     = P + k' - 1          folded input rows (stride 1, no padding: output o reads rows o .. o + k' - 1)

Folded row a holds padded rows a*s .. a*s + s - 1; padded row j is image row j - front, or padding.
Padding is materialized with the input zero point Z_I (the real value 0), so the folded convolution
needs no border correction; zero filter taps and zero channels add nothing to the accumulator or to
sum(w_q), so M and FusedBias are those of the original weights. Channels within a folded pixel are
ordered (dy, dx, c), in the weights as in the input.

The cost: the input copy per call (read N*H*W*Ci bytes, write N*H'*W'*C' with C' = the folded
channels rounded up), and the zero taps the extended filter multiplies (for 7x7 stride 2: 8x8 of
which 49 are real, and 12 of 16 channels).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class StrideFold:
    """The folded convolution of a (kernel_size, stride, padding) one with in_channels channels."""

    stride: tuple[int, int]       # the block a folded pixel holds
    front: tuple[int, int]        # padding materialized before the image: a multiple of the stride
    shift: tuple[int, int]        # zero filter taps prepended: front - padding
    kernel: tuple[int, int]       # the folded filter, applied with stride 1 and no padding
    in_channels: int              # Ci of the original convolution
    channels: int                 # stride_h * stride_w * Ci rounded up to channels_to

    @classmethod
    def of(cls, in_channels: int, kernel_size, stride, padding, channels_to: int) -> "StrideFold":
        front = tuple(-(-p // s) * s for p, s in zip(padding, stride))
        shift = tuple(f - p for f, p in zip(front, padding))
        kernel = tuple(-(-(k + t) // s) for k, t, s in zip(kernel_size, shift, stride))
        folded = stride[0] * stride[1] * in_channels
        return cls(tuple(stride), front, shift, kernel, in_channels, -(-folded // channels_to) * channels_to)

    def input_hw(self, out_hw) -> tuple[int, int]:
        """The folded input's (H', W') for an output of out_hw."""
        return tuple(o + k - 1 for o, k in zip(out_hw, self.kernel))

    def weight(self, w_q: torch.Tensor) -> torch.Tensor:
        """w_q [Co, Kh, Kw, Ci] -> the folded filter [Co, Kh', Kw', channels], contiguous."""
        co, kh, kw, ci = w_q.shape
        (sh, sw), (th, tw), (fh, fw) = self.stride, self.shift, self.kernel
        # Zero taps before (the shift) and after (up to a whole number of blocks).
        extended = F.pad(w_q, (0, 0, tw, fw * sw - kw - tw, th, fh * sh - kh - th))
        blocks = extended.view(co, fh, sh, fw, sw, ci).permute(0, 1, 3, 2, 4, 5).reshape(co, fh, fw, sh * sw * ci)
        return F.pad(blocks, (0, self.channels - sh * sw * ci)).contiguous()

    def input(self, x: torch.Tensor, out_hw, fill: int) -> torch.Tensor:
        """x int8 [N, H, W, Ci] (any strides) -> the folded input [N, H', W', channels], padding
        holding `fill` (Z_I). Two copies: the image into a padded frame, the frame into blocks. The
        channels past stride_h * stride_w * Ci are left as they were allocated: the folded weights
        are zero there."""
        n, h, w, ci = x.shape
        (sh, sw), (fh, fw) = self.stride, self.front
        hf, wf = self.input_hw(out_hw)
        frame = torch.full((n, hf * sh, wf * sw, ci), fill, dtype=x.dtype, device=x.device)
        # The image rows and columns some output reads; those past the last output's taps are not.
        rows, columns = max(0, min(h, hf * sh - fh)), max(0, min(w, wf * sw - fw))
        frame[:, fh:fh + rows, fw:fw + columns] = x[:, :rows, :columns]
        out = torch.empty((n, hf, wf, self.channels), dtype=x.dtype, device=x.device)
        out[..., :sh * sw * ci].view(n, hf, wf, sh, sw, ci).copy_(
            frame.view(n, hf, sh, wf, sw, ci).permute(0, 1, 3, 2, 4, 5))
        return out
