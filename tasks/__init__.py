"""Datasets and models: modular arithmetic, the 1-layer transformer, the 2-layer MLP,
soft-target distillation (losses and accurate student-teacher metrics), and the
quantization lab (text corpus, BERT/OPT-like models with clipped softmax and gated
attention, simulated quantization, outlier metrics)."""

from tasks._common import MODEL_DTYPES as MODEL_DTYPES
from tasks._common import Params as Params
from tasks._distill import DISTILL_LOSSES as DISTILL_LOSSES
from tasks._distill import kl_divergence as kl_divergence
from tasks._distill import soft_target_gradient as soft_target_gradient
from tasks._mlp import ACTIVATIONS as ACTIVATIONS
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
from tasks._quant_attention import gate_logits as gate_logits
from tasks._quant_corpus import Corpus as Corpus
from tasks._quant_corpus import build_corpus as build_corpus
from tasks._quant_corpus import make_quant_batch as make_quant_batch
from tasks._quant_corpus import quant_eval_batches as quant_eval_batches
from tasks._quant_corpus import stack_batches as stack_batches
from tasks._quant_fakequant import fake_quant_asymmetric as fake_quant_asymmetric
from tasks._quant_fakequant import fake_quant_symmetric as fake_quant_symmetric
from tasks._quant_fakequant import mse_range as mse_range
from tasks._quant_fakequant import quantize_weights as quantize_weights
from tasks._quant_fakequant import running_minmax as running_minmax
from tasks._quant_fakequant import weight_absmax as weight_absmax
from tasks._quant_metrics import attention_mass as attention_mass
from tasks._quant_metrics import inf_norm as inf_norm
from tasks._quant_metrics import kurtosis as kurtosis
from tasks._quant_metrics import outlier_mask as outlier_mask
from tasks._quant_models import PYDOC_CHAR_VOCAB_SIZE as PYDOC_CHAR_VOCAB_SIZE
from tasks._quant_models import QuantModelConfig as QuantModelConfig
from tasks._quant_models import decay_mask as decay_mask
from tasks._quant_models import lm_loss_sums as lm_loss_sums
from tasks._quant_models import quant_model_apply as quant_model_apply
from tasks._quant_models import quant_model_init as quant_model_init
from tasks._quant_models import weight_names as weight_names
from tasks._quant_probe import make_quant_probe as make_quant_probe
from tasks._quant_probe import quant_tap_names as quant_tap_names
from tasks._transformer import INITS as INITS
from tasks._transformer import TransformerConfig as TransformerConfig
from tasks._transformer import transformer_apply as transformer_apply
from tasks._transformer import transformer_apply_fast as transformer_apply_fast
from tasks._transformer import transformer_init as transformer_init
