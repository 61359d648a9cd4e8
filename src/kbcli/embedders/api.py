"""What the embedders behind a provider's SDK share (:class:`~kbcli.embedders.OpenAIEmbedder`,
:class:`~kbcli.embedders.GeminiEmbedder`): each setting from the argument, ``rag.embedding``
or the environment; the API key; the request limits and the retry policy; a client replaced
after an attempt ran past its deadline; and the message of a request that failed.

A provider sets the class attributes (its name, environment variables, defaults) and writes
what differs: the client (``_make_client``), the request, how its SDK's exceptions read
(``_classify``) and what its refusals mean (``_refusal``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kbcli.config.lookup import Config
from kbcli.embedders.base import BaseEmbedder
from kbcli.embedders.provider_settings import (
    apply_request_settings,
    embedding_settings,
    find_api_key,
    first_env,
    host_of,
)
from kbcli.errors import EmbedderError
from kbcli.providers.retry import Failure, RetryPolicy, call_with_retries, give_up_hint


class APIEmbedder(BaseEmbedder):
    """An embedder that calls a provider's API through its SDK (see the module docstring).

    Each setting comes from the argument, else ``rag.embedding`` in the config, else the
    environment variables the provider names (``key_env``, ``base_url_env``, ``model_env``),
    else its defaults.
    """

    provider = "api"
    key_env: tuple[str, ...] = ()
    base_url_env: tuple[str, ...] = ()
    model_env: tuple[str, ...] = ()
    default_model = ""
    default_base_url = ""
    missing_key = "API key not found"  # the error when no key is set anywhere
    max_inputs_per_request = 2048

    dimensions: int | None
    timeout: float
    retry_budget: float
    retry_policy: RetryPolicy

    def __init__(
        self,
        api_key: str | None = None,
        base_url: str | None = None,
        model: str | None = None,
        *,
        dimensions: int | None = None,
        batch_size: int | None = None,
        max_retries: int | None = None,
        timeout: float | None = None,
        retry_budget: float | None = None,
        config: Config | None = None,
    ) -> None:
        settings = embedding_settings(self.provider, config)
        key, source = find_api_key(api_key, self.key_env)
        if not key:
            raise EmbedderError(self.missing_key)
        self.key_source = source
        self.base_url = self._base_url(
            base_url or settings.base_url or first_env(*self.base_url_env)[0]
        )
        self.model = self._model_name(
            model or settings.model or first_env(*self.model_env)[0] or self.default_model
        )
        apply_request_settings(
            self,
            settings,
            dimensions=dimensions,
            batch_size=batch_size,
            max_retries=max_retries,
            timeout=timeout,
            retry_budget=retry_budget,
        )
        # Only a requested or a returned size is this embedder's identity, never a guess from the
        # model's name: a compatible server may serve another size under the same name.
        self.dimension = self.dimensions
        self._api_key = key
        self._client = self._make_client()

    # --- what a provider writes ---------------------------------------------------------------

    def _base_url(self, given: str | None) -> str | None:
        """The base URL to use from the first one given (None: the SDK's own)."""
        return given

    def _model_name(self, given: str) -> str:
        """The model name as the API wants it."""
        return given

    def _make_client(self) -> Any:
        """A new SDK client with its own retries off (ours are :mod:`kbcli.providers.retry`).
        ``Any``: each subclass's SDK (openai, google-genai: optional packages) has its own."""
        raise NotImplementedError

    def _classify(self, exc: BaseException) -> Failure | None:
        """What an exception of the SDK means to the retry policy (None: not the SDK's)."""
        raise NotImplementedError

    def _refusal(self, failure: Failure, where: str, detail: str) -> str | None:
        """The message for a request the server refused for good (by its status), or None
        for the generic one."""
        return None

    # --- shared ------------------------------------------------------------------------------

    @property
    def host(self) -> str:
        """Host (and port) of the server in use, for messages."""
        return host_of(self.base_url or self.default_base_url)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r})"

    def _with_retries(self, request: Callable[[], list[list[float]]]) -> list[list[float]]:
        """``request()`` under the retry policy, its failures described in one message."""
        return call_with_retries(
            request,
            policy=self.retry_policy,
            classify=self._classify,
            describe=self._describe,
            on_abandon=self._abandon_client,
        )

    def _abandon_client(self) -> None:
        """Replace the client after an attempt ran past its deadline, closing its sockets."""
        old, self._client = self._client, self._make_client()
        old.close()

    def _describe(self, failure: Failure, attempts: int) -> str:
        where = f"model {self.model} at {self.host}"
        detail = f": {failure.detail}" if failure.detail else ""
        status = failure.status
        if failure.retryable:
            what = f"status {status}" if status is not None else failure.reason
            hint = give_up_hint(failure, self.host)
            end = f": {hint}" if failure.refused else f"{detail}; {hint}"
            return (
                f"{self.provider} embedding request failed after {attempts} attempts ({what}) "
                f"for {where}{end}"
            )
        refused = self._refusal(failure, where, detail)
        if refused is not None:
            return refused
        shown = f"status {status}" if status is not None else failure.reason
        return f"{self.provider} embedding request failed ({shown}) for {where}{detail}"
