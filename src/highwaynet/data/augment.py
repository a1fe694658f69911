"""Data augmentation for image batches on their device: random crops with zero padding, and flips."""

from __future__ import annotations

import torch
from torch import Tensor

from .._checks import check_finite, check_size, check_tensor

__all__ = ["RandomCropFlip"]


class RandomCropFlip:
    """Pad each image by ``padding`` zeros, crop back to its size at a random offset, and flip it
    left-right with probability ``flip`` (draws from the global RNG, so a seeded run is repeatable).

    Works on a whole batch ``(N, C, H, W)`` at once, on any device.
    """

    def __init__(self, padding: int = 2, flip: float = 0.5) -> None:
        self.padding = check_size("padding", padding, minimum=0)
        if not 0 <= check_finite("flip", flip) <= 1:
            raise ValueError(f"flip must be a probability in [0, 1], got {flip}")
        self.flip = flip

    def __call__(self, x: Tensor) -> Tensor:
        check_tensor("x", x, owner="RandomCropFlip")
        if x.dim() != 4:
            raise ValueError(f"RandomCropFlip expects x, a batch of images (N, C, H, W), got {tuple(x.shape)}")
        n, _, h, w = x.shape
        if x.numel() == 0:  # (an empty batch: nothing to crop, and no minimum to pad with)
            return x
        p = self.padding
        if p:
            # Zero in standardised units is the mean pixel; pad with the batch's minimum (the background),
            # kept on the device (no host round trip, so that a training step can be a CUDA graph). The images
            # are copied in as they are: shifting them to pad with zeros and back rounded every pixel.
            padded = x.amin().expand(n, x.shape[1], h + 2 * p, w + 2 * p).clone()
            padded[:, :, p:p + h, p:p + w] = x
            dy = torch.randint(0, 2 * p + 1, (n,), device=x.device)
            dx = torch.randint(0, 2 * p + 1, (n,), device=x.device)
            rows = (dy[:, None] + torch.arange(h, device=x.device))[:, None, :, None]
            cols = (dx[:, None] + torch.arange(w, device=x.device))[:, None, None, :]
            x = padded[torch.arange(n, device=x.device)[:, None, None, None],
                       torch.arange(x.shape[1], device=x.device)[None, :, None, None], rows, cols]
        if self.flip:
            flipped = torch.rand(n, device=x.device) < self.flip
            x = torch.where(flipped[:, None, None, None], x.flip(-1), x)
        return x

    def __repr__(self) -> str:
        return f"RandomCropFlip(padding={self.padding}, flip={self.flip})"
