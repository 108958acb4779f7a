"""vLLM's native weight transfer for the `remote` backend: the trainer's tensors go GPU to GPU over NCCL,
no files (`policy.weight_transport: vllm_nccl`). Written against vLLM's weight-transfer API and not yet
run on a GPU by this project.

The server is started with `VLLM_SERVER_DEV_MODE=1 vllm serve ... --weight-transfer-config
'{"backend": "nccl"}'`. At the first push to a server the trainer asks its world size (`GET
/get_world_size`), opens a TCP port and calls `POST /init_weight_transfer_engine {"init_info":
{"master_address", "master_port", "rank_offset": 1, "world_size": 1 + the server's}}` while it joins the
same NCCL group as rank 0 (`NCCLWeightTransferEngine.trainer_init`). Each push then drains the server
(`POST /pause?mode=wait`), posts `POST /update_weights {"update_info": {"names", "dtype_names", "shapes",
"packed": true, "packed_buffer_size_bytes"}}` while broadcasting the tensors, cast to the engine's dtype
one at a time and packed into buffers of `policy.weight_bucket_mb` (`trainer_send_weights`), resets the
prefix cache and resumes (`POST /resume`). Tied tensors are sent once, as for files.

`TRIALGROUND_NCCL_ADDRESS` names the address the servers reach the trainer at (default: this host's
name as it resolves).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from trialground.policy.backends.remote.push_http import PushFailed, ok, post
from trialground.policy.weight_files import buckets


def update_info(weights: Mapping[str, Any], dtype: Any, bucket_bytes: int) -> dict[str, Any]:
    """vLLM's `NCCLWeightTransferUpdateInfo` for `weights` as they will be sent (tied copies once)."""
    names, dtypes, shapes = [], [], []
    for bucket in buckets(weights.items(), bucket_bytes, dtype):
        for name, tensor in bucket:
            target = dtype if dtype is not None and tensor.is_floating_point() else tensor.dtype
            names.append(name)
            dtypes.append(str(target).removeprefix("torch."))
            shapes.append(list(tensor.shape))
    return {
        "names": names,
        "dtype_names": dtypes,
        "shapes": shapes,
        "packed": True,
        "packed_buffer_size_bytes": bucket_bytes,
    }


def _cast(weights: Mapping[str, Any], dtype: Any, bucket_bytes: int) -> Iterator[tuple[str, Any]]:
    for bucket in buckets(weights.items(), bucket_bytes, dtype):
        for name, tensor in bucket:
            yield name, tensor.to(dtype) if dtype is not None and tensor.is_floating_point() else tensor


class VLLMNccl:
    uses_files = False
    # vLLM's runtime LoRA routes (the server started with --enable-lora and
    # VLLM_ALLOW_RUNTIME_LORA_UPDATING=True); `policy serve` answers them too
    adapter_routes = ("/v1/load_lora_adapter", "/v1/unload_lora_adapter")

    def __init__(self, *, bucket_bytes: int, dtype: Any) -> None:
        self.bucket_bytes, self.dtype = bucket_bytes, dtype
        self._groups: dict[str, Any] = {}

    def push(self, client: httpx.Client, server: str, prepared: Any, version: int) -> None:
        from vllm.distributed.weight_transfer.nccl_engine import (
            NCCLTrainerSendWeightsArgs,
            NCCLWeightTransferEngine,
        )

        weights: Mapping[str, Any] = prepared
        if any(not t.is_cuda for t in weights.values()):
            raise PushFailed(
                f"{server}: vllm_nccl sends from the trainer's GPU; these weights are not on one"
            )
        group = self._groups.get(server) or self._join(client, server)
        info = update_info(weights, self.dtype, self.bucket_bytes)
        ok(server, post(client, server, "/pause", params={"mode": "wait"}))
        try:
            with ThreadPoolExecutor(max_workers=1) as pool:
                answer = pool.submit(post, client, server, "/update_weights", json={"update_info": info})
                args = NCCLTrainerSendWeightsArgs(
                    group=group, packed=True, packed_buffer_size_bytes=self.bucket_bytes
                )
                NCCLWeightTransferEngine.trainer_send_weights(
                    _cast(weights, self.dtype, self.bucket_bytes), args
                )
                ok(server, answer.result())
            ok(server, post(client, server, "/reset_prefix_cache"))
        finally:
            ok(server, post(client, server, "/resume"))

    def _join(self, client: httpx.Client, server: str) -> Any:
        from vllm.distributed.weight_transfer.nccl_engine import NCCLWeightTransferEngine

        resp = client.get(server + "/get_world_size")
        ok(server, resp, "start vLLM with VLLM_SERVER_DEV_MODE=1 and --weight-transfer-config")
        world = int(resp.json()["world_size"])
        address = os.environ.get("TRIALGROUND_NCCL_ADDRESS") or socket.gethostbyname(socket.gethostname())
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        init = {"master_address": address, "master_port": port, "world_size": world + 1}
        with ThreadPoolExecutor(max_workers=1) as pool:
            answer = pool.submit(
                post,
                client,
                server,
                "/init_weight_transfer_engine",
                json={"init_info": {**init, "rank_offset": 1}},
            )
            group = NCCLWeightTransferEngine.trainer_init(init)
            ok(server, answer.result())
        self._groups[server] = group
        return group
