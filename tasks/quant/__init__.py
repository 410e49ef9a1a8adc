"""The quantization lab's data and models (Bondarenko et al. 2023): text and generated
corpora with their batches, BERT/OPT-like models with clipped softmax and gated attention,
simulated quantization, and the outlier metrics. `grokbench.quant` trains and evaluates them."""

from tasks.quant._corpus import SYNTHETIC_CHARS as SYNTHETIC_CHARS
from tasks.quant._corpus import SYNTHETIC_CORPORA as SYNTHETIC_CORPORA
from tasks.quant._corpus import Corpus as Corpus
from tasks.quant._corpus import build_corpus as build_corpus
from tasks.quant._corpus import make_quant_batch as make_quant_batch
from tasks.quant._corpus import quant_eval_batches as quant_eval_batches
from tasks.quant._corpus import stack_batches as stack_batches
from tasks.quant._fakequant import fake_quant_asymmetric as fake_quant_asymmetric
from tasks.quant._fakequant import fake_quant_symmetric as fake_quant_symmetric
from tasks.quant._fakequant import mse_range as mse_range
from tasks.quant._fakequant import quantize_weights as quantize_weights
from tasks.quant._fakequant import running_minmax as running_minmax
from tasks.quant._metrics import attention_mass as attention_mass
from tasks.quant._metrics import inf_norm as inf_norm
from tasks.quant._metrics import kurtosis as kurtosis
from tasks.quant._metrics import outlier_mask as outlier_mask
from tasks.quant._models import MATMUL_PRECISION as MATMUL_PRECISION
from tasks.quant._models import PYDOC_CHAR_VOCAB_SIZE as PYDOC_CHAR_VOCAB_SIZE
from tasks.quant._models import QuantModelConfig as QuantModelConfig
from tasks.quant._models import decay_mask as decay_mask
from tasks.quant._models import lm_head_loss_sums as lm_head_loss_sums
from tasks.quant._models import lm_loss_sums as lm_loss_sums
from tasks.quant._models import quant_model_apply as quant_model_apply
from tasks.quant._models import quant_model_hidden as quant_model_hidden
from tasks.quant._models import quant_model_init as quant_model_init
from tasks.quant._models import weight_names as weight_names
from tasks.quant._probe import make_quant_probe as make_quant_probe
from tasks.quant._probe import quant_tap_names as quant_tap_names
