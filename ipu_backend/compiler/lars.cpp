#include "ipu_backend/compiler/lars.h"

#include <numeric>

namespace ipu {

int expandLars(Graph& g) {
  const int n = static_cast<int>(g.ops().size());
  std::vector<int> lars;
  for (const Op& op : g.ops())
    if ((op.kind == OpKind::SgdUpdate || op.kind == OpKind::SgdUpdateScaled) &&
        op.attrs.getFloat("lars_eta", 0.0) > 0.0)
      lars.push_back(op.id);
  if (lars.empty()) return 0;

  // Append each update's rate computation, remembering which new ops belong before which update.
  std::vector<std::vector<int>> before(static_cast<size_t>(n));
  std::vector<int> rates(static_cast<size_t>(n), -1);
  for (int u : lars) {
    const Op op = g.op(u);
    // Copies: adding ops grows the tensor table, which would leave references dangling.
    const Tensor w = g.tensor(op.inputs[0]);
    const int first = static_cast<int>(g.ops().size());
    auto sumOfSquares = [&](int t, const std::string& what) {
      const Tensor x = g.tensor(t);
      int f = t;
      if (x.dtype != DType::F32)
        f = g.addOp1(OpKind::Cast, {t}, Attrs{{"dtype", std::string("f32")}},
                     w.name + "/lars_" + what + "_f32");
      const int sq = g.addOp1(OpKind::Unary, {f}, Attrs{{"fn", std::string("square")}},
                              w.name + "/lars_" + what + "_squared");
      std::vector<i64> axes(x.shape.size());
      std::iota(axes.begin(), axes.end(), 0);
      return g.addOp1(OpKind::Reduce, {sq}, Attrs{{"fn", std::string("sum")}, {"axes", axes}},
                      w.name + "/lars_" + what + "_sumsq");
    };
    const int wss = sumOfSquares(op.inputs[0], "weight");
    const int gss = sumOfSquares(op.inputs[2], "grad");
    const int lr = op.inputs[3];
    int inverseScale = -1;
    if (op.kind == OpKind::SgdUpdateScaled) {
      inverseScale = op.inputs[4];
    } else {
      inverseScale =
          g.addOp1(OpKind::Constant, {}, Attrs{{"shape", g.tensor(lr).shape}, {"value", 1.0}},
                   w.name + "/lars_grad_scale_inverse");
    }
    rates[u] = g.addOp1(OpKind::LarsLearningRate, {wss, gss, lr, inverseScale},
                        Attrs{{"eta", op.attrs.getFloat("lars_eta")},
                              {"weight_decay", op.attrs.getFloat("weight_decay")},
                              {"epsilon", op.attrs.getFloat("lars_epsilon", 0.0)}},
                        w.name + "/lars_lr");
    for (int i = first; i < static_cast<int>(g.ops().size()); ++i) before[u].push_back(i);
  }

  std::vector<int> order;
  std::vector<int> newId(static_cast<size_t>(n), -1);
  for (int i = 0; i < n; ++i) {
    for (int o : before[i]) order.push_back(o);
    newId[i] = static_cast<int>(order.size());
    order.push_back(i);
  }
  g.reorderOps(order);

  for (int u : lars) {
    const Op& op = g.op(newId[u]);
    std::vector<int> inputs = op.inputs;
    inputs[3] = rates[u];
    Attrs attrs;
    for (const auto& [k, v] : op.attrs.all())
      if (k != "lars_eta" && k != "lars_epsilon") attrs.set(k, v);
    g.rewriteOp(newId[u], std::move(inputs), std::move(attrs));
  }
  return static_cast<int>(lars.size());
}

}  // namespace ipu
