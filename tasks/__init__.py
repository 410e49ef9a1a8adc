"""Datasets and models: modular arithmetic, the 1-layer transformer, the 2-layer MLP,
soft-target distillation (losses and accurate student-teacher metrics), and the emulated
matmul precisions of the models (TF32 and bfloat16 operands, float32 accumulation).
The quantization lab's corpora and models are the subpackage `tasks.quant`. Every cache of
compiled programs, here and above, is a `compiled_cache` (bounded, cleared all at once)."""

from tasks._common import MODEL_DTYPES as MODEL_DTYPES
from tasks._common import Params as Params
from tasks._compiled import clear_compiled_caches as clear_compiled_caches
from tasks._compiled import compiled_cache as compiled_cache
from tasks._compiled import compiled_caches as compiled_caches
from tasks._distill import DISTILL_LOSSES as DISTILL_LOSSES
from tasks._distill import DISTILL_OBJECTIVES as DISTILL_OBJECTIVES
from tasks._distill import kl_divergence as kl_divergence
from tasks._distill import soft_target_gradient as soft_target_gradient
from tasks._matmul import MATMUL_PRECISIONS as MATMUL_PRECISIONS
from tasks._matmul import dot as dot
from tasks._matmul import einsum as einsum
from tasks._matmul import round_operand as round_operand
from tasks._matmul import round_output_cotangent as round_output_cotangent
from tasks._matmul import round_to as round_to
from tasks._mlp import ACTIVATIONS as ACTIVATIONS
from tasks._mlp import MLP_INITS as MLP_INITS
from tasks._mlp import MLPConfig as MLPConfig
from tasks._mlp import mlp_apply as mlp_apply
from tasks._mlp import mlp_init as mlp_init
from tasks._models import Model as Model
from tasks._models import build_model as build_model
from tasks._modular import OPERATIONS as OPERATIONS
from tasks._modular import ModularData as ModularData
from tasks._modular import ModularTask as ModularTask
from tasks._modular import modular_split as modular_split
from tasks._modular import modular_table as modular_table
from tasks._transformer import INITS as INITS
from tasks._transformer import TransformerConfig as TransformerConfig
from tasks._transformer import transformer_apply as transformer_apply
from tasks._transformer import transformer_apply_fast as transformer_apply_fast
from tasks._transformer import transformer_init as transformer_init
