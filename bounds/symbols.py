"""Every symbol of THEORY.md, declared once, with its assumptions.

The other modules of :mod:`bounds` import these objects and never build their own
``Symbol``: two symbols that print alike but carry different assumptions would
silently refuse to cancel.

>>> (eps > 0, G >= 1, d >= 0, (1 + sigma2).is_positive)
(True, True, True, True)
"""
from __future__ import annotations

import sympy as sp

# --- §1 setting -------------------------------------------------------------------------
eps = sp.Symbol("epsilon", positive=True)  # ratio threshold: the cap is 1 + eps
G = sp.Symbol("G", positive=True, integer=True)  # group size
d = sp.Symbol("d", nonnegative=True)  # largest delay d_t <= d (A4), in policy versions
eta = sp.Symbol("eta", positive=True)  # step size
T = sp.Symbol("T", positive=True)  # number of steps (>= 1)

# ratio law w = pi_theta / pi_b under pi_b (E_b w = 1)
sigma2 = sp.Symbol("sigma2", nonnegative=True)  # Var_b(w) = chi^2(pi_theta || pi_b)
mu4 = sp.Symbol("mu4", nonnegative=True)  # E_b (w - 1)^4

# A1-A5 constants
R_max = sp.Symbol("R_max", positive=True)  # A1: r in [0, R_max]
L_pi = sp.Symbol("L_pi", positive=True)  # A2: ||grad log pi|| <= L_pi
H_pi = sp.Symbol("H_pi", nonnegative=True)  # A3: ||hess log pi|| <= H_pi
M = sp.Symbol("M", positive=True)  # A2: ||X_i|| <= M = R_max L_pi
L = sp.Symbol("L", positive=True)  # A3: smoothness of J
C2 = sp.Symbol("C2", positive=True)  # A5: chi^2 <= C2 ||theta - theta'||^2
C4 = sp.Symbol("C4", positive=True)  # A5: mu4 <= C4 ||theta - theta'||^4
r0 = sp.Symbol("r0", positive=True)  # A5: overlap radius
R = sp.Symbol("R", nonnegative=True)  # drift radius ||theta_t - theta_{t-d_t}|| <= R
DeltaJ = sp.Symbol("DeltaJ", positive=True)  # J* - J(theta_0)

# --- §3 key inequalities and laws ------------------------------------------------------
y = sp.Symbol("y", nonnegative=True)  # a non-negative excess, e.g. W - 1
s2 = sp.Symbol("s2", nonnegative=True)  # a variance (Scarf's bound)
k = sp.Symbol("k", real=True)  # a strike (Scarf's bound)
mu = sp.Symbol("mu", real=True)  # a mean (Scarf's bound)
p = sp.Symbol("p", positive=True)  # a probability in (0, 1)
delta = sp.Symbol("delta", nonnegative=True)  # "just above": hi = 1 + eps + delta, delta -> 0+
Delta = sp.Symbol("Delta", positive=True)  # E3 policy gap |theta - theta_b|
z = sp.Symbol("z", real=True)  # integration variable (log w)
w = sp.Symbol("w", positive=True)  # one trajectory ratio
wbar = sp.Symbol("Wbar", positive=True)  # group mean ratio (1/G) sum_i w_i
wmax = sp.Symbol("w_max", positive=True)  # largest ratio in the group

# --- §4 Lemma 3 and Corollary 3 ---------------------------------------------------------
S = sp.Symbol("S", positive=True)  # second-moment bound E||g||^2 <= S
bias2 = sp.Symbol("bbar2", nonnegative=True)  # (1/T) sum_t E||b_t||^2
a = sp.Symbol("a", positive=True)  # a = 2 DeltaJ
B = sp.Symbol("B", nonnegative=True)  # B = L (1+eps)^2 M^2
Dc = sp.Symbol("D", positive=True)  # delay term written D eta^4 (Corollary 3)


def ratios(n: int, name: str = "w") -> tuple[sp.Symbol, ...]:
    """``n`` positive ratio symbols ``w1..wn`` (cached by sympy, so equal across calls)."""
    if n < 1:
        raise ValueError(f"need at least one ratio, got n = {n}")
    return sp.symbols(f"{name}1:{n + 1}", positive=True)

# --- §8 normalising optimisers -----------------------------------------------------------
t = sp.Symbol("t", positive=True, integer=True)  # optimiser step index (1, 2, ...)
beta1 = sp.Symbol("beta1", nonnegative=True)  # Adam's first-moment decay, in [0, 1)
beta2 = sp.Symbol("beta2", positive=True)  # Adam's second-moment decay, in (0, 1)
m2 = sp.Symbol("m2", nonnegative=True)  # a second moment E g_j^2 (with its mean mu: m2 >= mu^2)
c2 = sp.Symbol("c2", nonnegative=True)  # E_b c(w)^2, a scheme's weight second moment
cmax = sp.Symbol("c_max", nonnegative=True)  # the largest weight one trajectory can get
prompts_per_step = sp.Symbol("B_g", positive=True, integer=True)  # groups per batch (B in §8)

# --- §9 the batch's mean squared error at (B, G) -------------------------------------------
bsq = sp.Symbol("b_sq", nonnegative=True)  # ||b(G)||^2, the squared bias of one group's estimate
Vb = sp.Symbol("V_b", nonnegative=True)  # V_b(G): variance over prompts of a group's conditional mean
Sw = sp.Symbol("S_w", nonnegative=True)  # S_w(G) = G W(G): the within-group variance times G
zeta1 = sp.Symbol("zeta1", nonnegative=True)  # Hoeffding: Var of the kernel's projection h_1(X)
zeta2 = sp.Symbol("zeta2", nonnegative=True)  # Hoeffding: Var of the kernel k(X, Y) (zeta2 >= 2 zeta1)
Nbud = sp.Symbol("N", positive=True, integer=True)  # the sample budget N = B G per update
share = sp.Symbol("s", nonnegative=True)  # the largest share of one trajectory, c_max / (B G) (§8.3)
mass_mean = sp.Symbol("mbar", nonnegative=True)  # E[(1/G) sum_i c_i], the expected group mass
kappa_w = sp.Symbol("kappa_w", positive=True)  # the share bound's constant (1 group-capped, 2 per-sample)
