"""Request and response bodies: the OpenAI chat and completions schemas, our ``speculative``
extension, ``/generate``, and the error object.

Requests are strict: an unknown field is a 400 naming it, so a typo never silently does nothing.
OpenAI fields that change what is generated but that this server cannot honour (tools, logprobs,
penalties, n > 1) are accepted only at their neutral values; purely informational ones (``user``,
``metadata``, ``store``...) are accepted and ignored.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class UnsupportedValue(ValueError):
    """A known field at a value this server cannot honour; ``param`` names the field."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


def _reject_unless_neutral(body: BaseModel, neutral: dict[str, Any]) -> None:
    for name, allowed in neutral.items():
        value = getattr(body, name)
        if value is not None and value != allowed:
            raise UnsupportedValue(name, f"{name} = {value!r} is not supported by this server")


# ------------------------------------------------------------------ the speculative extension


class SpeculativeOptions(Strict):
    """Per-request speculation: any value left out comes from the server's settings."""

    mode: str | None = Field(None, description="model | prompt-lookup | hybrid | target")
    k: int | None = Field(None, description="most tokens drafted per step, 1..32")
    tau: float | None = Field(None, description="(0, 1]; 1 is lossless")
    adaptive_k: bool | None = None
    draft_min_confidence: float | None = None
    lookup_k: int | None = Field(None, description="most tokens a prompt-lookup copy proposes, 0..32 (0: k)")
    #: Each streamed chunk also lists its tokens, each with its origin, and the step's record.
    origins: bool = False
    #: Start from empty KV caches instead of reusing the previous request's (for fair comparisons).
    fresh_cache: bool = False


class TokenOrigin(BaseModel):
    id: int
    text: str
    #: draft: proposed and accepted; target: the target's own; degraded: the draft's alone, unverified.
    origin: Literal["draft", "target", "degraded"]


class StepInfo(BaseModel):
    drafted: int
    accepted: int
    emitted: int
    draft_ms: float
    #: The target's pass and the acceptance check after it; ``accept_ms`` is the check alone.
    verify_ms: float
    accept_ms: float = 0.0
    #: The target was unavailable: this step's tokens are the draft model's alone.
    degraded: bool | None = None
    #: The draft model failed, so this step was the target's alone.
    draft_failed: bool | None = None
    #: Branches (the draft's runner-up tokens) verified beside the draft, and whether one was kept
    #: (it is then the last of the accepted tokens).
    branches: int | None = None
    branch_kept: bool | None = None
    #: The reply's first step: the target's pass over the prompt (and at most a copy from it, no model draft),
    #: which gave the first token.
    prompt: bool | None = None


class SpeculativeReport(BaseModel):
    """What speculation did for one reply."""

    mode: str
    k: int
    tau: float
    adaptive_k: bool
    lookup_k: int
    #: True when tau = 1: the text is what the target alone would write (its distribution, when sampling).
    lossless: bool
    steps: int
    draft_tokens: int
    accepted_tokens: int
    acceptance_rate: float | None
    #: 1 + accepted / steps: tokens each target pass yields, as vLLM defines it.
    mean_acceptance_length: float
    #: For each draft position, the share of steps that drafted it and kept it.
    per_position_acceptance: list[float]
    #: Steps by how many drafted tokens they kept: index i counts steps that kept i.
    acceptance_histogram: list[int]
    draft_ms: float
    verify_ms: float
    mean_draft_ms: float
    mean_verify_ms: float
    prompt_tokens: int
    completion_tokens: int
    ttft_ms: float
    queue_ms: float
    seconds: float
    tokens_per_s: float
    #: The engine's own reason: eos | length | context | cancelled | stop (a stop string) | failed.
    finish_reason: str
    #: True when some tokens were written by the draft model alone while the target was unavailable.
    degraded: bool = False
    degraded_tokens: int = 0
    #: Failed forward passes (each retried, or replaced by draft-only or target-only steps).
    target_failures: int = 0
    draft_failures: int = 0
    #: Why the reply degraded or stopped: which model failed, and how.
    failure: str | None = None


class ChunkSpeculative(BaseModel):
    """The ``speculative`` object on a streamed chunk: per-step detail (with ``origins``) or the report."""

    tokens: list[TokenOrigin] | None = None
    step: StepInfo | None = None
    #: The drafted token the target rejected at this step (its own token replaced it), if any.
    rejected: TokenOrigin | None = None
    report: SpeculativeReport | None = None


# ------------------------------------------------------------------ OpenAI requests


class TextPart(Strict):
    type: Literal["text"]
    text: str


class ChatMessage(Strict):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart] | None = None
    name: str | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""


class StreamOptions(Strict):
    include_usage: bool = False
    include_obfuscation: bool | None = None


StopStrings = str | list[str] | None


def stop_list(stop: StopStrings) -> list[str]:
    """The stop strings of a request, checked: at most 4, none empty."""
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else list(stop)
    if len(stops) > 4:
        raise ValueError("at most 4 stop strings")
    if any(not s for s in stops):
        raise ValueError("a stop string must not be empty")
    return stops


class SamplingFields(Strict):
    """What chat and completions requests share."""

    model: str
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    seed: int | None = None
    stop: StopStrings = None
    n: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    speculative: SpeculativeOptions | None = None
    user: str | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    logit_bias: dict[str, float] | None = None

    @field_validator("stop")
    @classmethod
    def _valid_stops(cls, stop: StopStrings) -> StopStrings:
        stop_list(stop)
        return stop

    def stops(self) -> list[str]:
        return stop_list(self.stop)

    def token_limit(self) -> int | None:
        return self.max_tokens

    def neutral_values(self) -> dict[str, Any]:
        return {"n": 1, "frequency_penalty": 0.0, "presence_penalty": 0.0, "logit_bias": {}}

    @model_validator(mode="after")
    def _supported(self) -> SamplingFields:
        _reject_unless_neutral(self, self.neutral_values())
        return self


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = None
    response_format: dict[str, Any] | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    functions: list[Any] | None = None
    function_call: Any = None
    parallel_tool_calls: bool | None = None
    modalities: list[str] | None = None
    audio: Any = None
    prediction: Any = None
    store: bool | None = None
    metadata: dict[str, str] | None = None
    service_tier: str | None = None
    reasoning_effort: str | None = None
    verbosity: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None

    def neutral_values(self) -> dict[str, Any]:
        return {
            **super().neutral_values(),
            "logprobs": False,
            "top_logprobs": 0,
            "response_format": {"type": "text"},
            "tools": [],
            "tool_choice": "none",
            "functions": [],
            "function_call": "none",
            "modalities": ["text"],
            "audio": {},
            "prediction": {},
        }

    def token_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def chat(self) -> list[dict[str, str]]:
        """The messages as the chat template takes them (``developer`` is the newer name of ``system``)."""
        return [{"role": "system" if m.role == "developer" else m.role, "content": m.text()} for m in self.messages]


class CompletionRequest(SamplingFields):
    prompt: str | list[str] | list[int]
    echo: bool | None = None
    logprobs: int | None = None
    best_of: int | None = None
    suffix: str | None = None

    def neutral_values(self) -> dict[str, Any]:
        return {**super().neutral_values(), "echo": False, "logprobs": 0, "best_of": 1, "suffix": ""}

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, prompt: str | list[str] | list[int]) -> str | list[str] | list[int]:
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], str) and len(prompt) != 1:
            raise ValueError("exactly one prompt per request (n = 1, no batches)")
        if not prompt or prompt == [""]:
            raise ValueError("the prompt is empty")
        return prompt


# ------------------------------------------------------------------ OpenAI responses


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: str
    logprobs: None = None


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    #: True when the target was unavailable for part of the reply: those tokens are the draft's alone.
    degraded: bool = False
    speculative: SpeculativeReport


class Delta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChunkChoice(BaseModel):
    index: int = 0
    delta: Delta
    finish_reason: str | None = None
    logprobs: None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None
    #: Set on the chunk with the finish reason.
    degraded: bool | None = None
    speculative: ChunkSpeculative | None = None


class CompletionChoice(BaseModel):
    index: int = 0
    text: str
    finish_reason: str | None = None
    logprobs: None = None


class Completion(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None
    degraded: bool | None = None
    speculative: SpeculativeReport | ChunkSpeculative | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "specdec-tui"
    #: The draft model paired with it, if any.
    draft: str | None = None
    modes: list[str]
    max_context: int


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


# ------------------------------------------------------------------ /generate


class GenerateRequest(Strict):
    """The original design's endpoint: text in, text and what speculation did out."""

    prompt: str | None = Field(None, description="raw text, no chat template")
    messages: list[ChatMessage] | None = Field(None, description="a chat, through the model's chat template")
    max_new_tokens: int | None = Field(None, ge=1)
    k: int | None = None
    tau: float | None = None
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    seed: int | None = None
    mode: str | None = None
    adaptive_k: bool | None = None
    stop: StopStrings = None

    @model_validator(mode="after")
    def _one_input(self) -> GenerateRequest:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give exactly one of prompt or messages")
        if self.prompt == "" or self.messages == []:
            raise ValueError("the prompt is empty")
        stop_list(self.stop)
        return self

    def stops(self) -> list[str]:
        return stop_list(self.stop)


class GenerateResponse(BaseModel):
    text: str
    acceptance_rate: float | None
    latency_ms: float
    tokens_per_s: float
    ttft_ms: float
    mean_accepted_per_step: float
    steps: int
    drafted: int
    accepted: int
    finish_reason: str
    #: True when the target was unavailable for part of the reply: those tokens are the draft's alone.
    degraded: bool = False
    speculative: SpeculativeReport


# ------------------------------------------------------------------ errors


class ErrorBody(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody
