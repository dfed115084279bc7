"""The acceptance rule: which drafted tokens the target keeps, and what it emits after them.

Pure functions on tensors; no models. ``p`` is the target distribution, ``q`` the draft's, both
after temperature and top-p. ``tau`` = 1 is lossless; ``tau`` < 1 is lenient (see design.md):

- greedy: accept x iff x == argmax p (tau = 1), else iff p(x) >= tau * max p; a rejected draft's
  branch (the draft's runner-up there, scored in the same pass) is kept by the same rule;
- sampled: accept with probability min(1, p(x) / (tau q(x))); on the first rejection emit a
  sample of normalize(max(0, p - tau q)), falling back to p when that has no mass; if every
  draft is accepted emit a bonus sample of p.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Verdict:
    """Outcome of verifying one block: how many drafts were kept and the target's own token.

    ``branch``: the kept branch, which stands in for the last of the ``accepted`` drafts.
    """

    accepted: int
    next_token: int
    branch: int | None = None

    def kept(self, drafts: list[int]) -> list[int]:
        """The drafted tokens this verdict keeps, in order."""
        if self.branch is None:
            return drafts[: self.accepted]
        return [*drafts[: self.accepted - 1], self.branch]


def sampling_probs(logits: torch.Tensor, temperature: float, top_p: float = 1.0) -> torch.Tensor:
    """Distribution(s) over the last dim: softmax(logits / temperature) cut to the top-p nucleus."""
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p >= 1.0:
        return probs
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    # Keep the smallest prefix whose mass reaches top_p: a token stays if the mass before it is short.
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
    sorted_probs = sorted_probs.masked_fill(mass_before >= top_p, 0.0)
    kept = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
    return kept / kept.sum(dim=-1, keepdim=True)


#: Logits per chunk of ``first_argmax``'s first pass.
ARGMAX_CHUNK = 128


def first_argmax(logits: torch.Tensor) -> torch.Tensor:
    """The index of each row's first maximum over the last dim, as ``argmax`` gives it (NaN counting
    as the maximum). torch's argmax compares element by element (0.13-0.2 ms a row of 152k logits,
    about 1 ms a verify block); here one vectorized maximum per chunk of 128 finds the chunk, and an
    argmax over that chunk the index (0.03 ms a row)."""
    width = logits.shape[-1]
    rows = logits.reshape(-1, width)
    chunks = width // ARGMAX_CHUNK
    peaks = rows[:, : chunks * ARGMAX_CHUNK].reshape(rows.shape[0], chunks, ARGMAX_CHUNK).amax(dim=-1)
    if chunks * ARGMAX_CHUNK < width:
        peaks = torch.cat([peaks, rows[:, chunks * ARGMAX_CHUNK :].amax(dim=-1, keepdim=True)], dim=1)
    found = []
    for row, chunk in zip(rows, peaks.argmax(dim=-1).tolist(), strict=True):
        start = chunk * ARGMAX_CHUNK
        found.append(start + int(row[start : start + ARGMAX_CHUNK].argmax()))
    return torch.tensor(found).reshape(logits.shape[:-1])


def leading_true(mask: torch.Tensor) -> int:
    """Length of the run of True at the start of a 1-D bool tensor."""
    return int(mask.long().cumprod(dim=0).sum())


def greedy_accepts(tokens: torch.Tensor, logits: torch.Tensor, best: torch.Tensor, tau: float) -> torch.Tensor:
    """Whether each of ``tokens`` (n,) passes at temperature 0 against its row of ``logits`` (n, vocab)."""
    if tau >= 1.0:
        return best == tokens
    # p(x) >= tau * max p, compared as logits so no softmax over the vocabulary is needed.
    token_logits = logits.gather(1, tokens[:, None])[:, 0]
    return token_logits - logits.max(dim=-1).values >= math.log(tau)


def greedy_verdict(drafts: torch.Tensor, logits: torch.Tensor, tau: float,
                   branches: Sequence[tuple[int, int]] = ()) -> Verdict:
    """Verify ``drafts`` (k,) against target ``logits`` (k + 1 + b, vocab) at temperature 0.

    ``branches``: b ``(i, token)`` pairs, each a token standing in for draft i, their rows following
    the draft's k + 1 in that order. Where the target rejects draft i but accepts its branch, the
    branch is kept and the target's token after it (from the branch's row) ends the block: every
    kept token still passed the rule against the target's logits after exactly the tokens before it.
    """
    best = first_argmax(logits)
    k = drafts.shape[0]
    accepted = leading_true(greedy_accepts(drafts, logits[:k], best[:k], tau))
    for row, (position, token) in enumerate(branches, start=k + 1):
        if position == accepted < k:
            branch = torch.tensor([token])
            if bool(greedy_accepts(branch, logits[accepted : accepted + 1], best[accepted : accepted + 1], tau)[0]):
                return Verdict(accepted + 1, int(best[row]), token)
    return Verdict(accepted, int(best[accepted]))


def acceptance_probability(p_x: torch.Tensor, q_x: torch.Tensor, tau: float) -> torch.Tensor:
    """min(1, p(x) / (tau q(x))); where tau q(x) is 0 (or underflows) the token is kept iff p > 0."""
    scaled = tau * q_x
    ratio = torch.where(scaled > 0, p_x / scaled, (p_x > 0).to(p_x.dtype))
    return ratio.clamp(max=1.0)


def residual_distribution(p: torch.Tensor, q: torch.Tensor, tau: float) -> torch.Tensor:
    """normalize(max(0, p - tau q)) over the last dim, or p where that leaves no mass."""
    residual = (p - tau * q).clamp(min=0.0)
    mass = residual.sum(dim=-1, keepdim=True)
    return torch.where(mass > 0, residual / mass.clamp(min=1e-30), p)


def sampled_verdict(
    drafts: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    tau: float,
    generator: torch.Generator | None = None,
) -> Verdict:
    """Verify ``drafts`` (k,) by rejection sampling.

    ``draft_probs`` (k, vocab) is q for each draft; None means the drafter proposed
    deterministically (q is one-hot on the draft). ``target_probs`` is (k + 1, vocab).
    """
    k = drafts.shape[0]
    rows = torch.arange(k)
    q = draft_probs if draft_probs is not None else one_hot_rows(drafts, target_probs.shape[-1])
    accept = acceptance_probability(target_probs[rows, drafts], q[rows, drafts], tau)
    uniforms = torch.rand(k, generator=generator)
    accepted = leading_true(uniforms < accept)
    if accepted == k:
        source = target_probs[k]
    else:
        source = residual_distribution(target_probs[accepted], q[accepted], tau)
    return Verdict(accepted, int(torch.multinomial(source, 1, generator=generator)))


def one_hot_rows(tokens: torch.Tensor, width: int) -> torch.Tensor:
    """(k, width) float rows, each one-hot on ``tokens[i]``."""
    rows = torch.zeros(tokens.shape[0], width)
    rows[torch.arange(tokens.shape[0]), tokens] = 1.0
    return rows

