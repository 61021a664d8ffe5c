#include "anchor/train/records.hpp"

#include <stdexcept>

#include "anchor/common/json_fields.hpp"

namespace anchor::train {

nlohmann::json StepRecord::to_json() const {
  nlohmann::json j = {{"step", step},
                      {"loss", loss},
                      {"grad_norm", grad_norm},
                      {"lr", lr},
                      {"batch_digest", batch_digest},
                      {"data_wait_s", data_wait_s},
                      {"compute_s", compute_s},
                      {"comm_s", comm_s},
                      {"replica_check_s", replica_check_s},
                      {"tokens", tokens},
                      {"loss_scale", loss_scale},
                      {"skipped", skipped}};
  if (!nonfinite_grad.empty()) j["nonfinite_grad"] = nonfinite_grad;
  return j;
}

StepRecord StepRecord::from_json(const nlohmann::json& j, const std::string& where) {
  JsonFields f(j, where);
  StepRecord r;
  r.step = f.integer("step");
  r.loss = f.number("loss");
  r.grad_norm = f.number("grad_norm");
  r.lr = f.number("lr");
  r.batch_digest = f.str("batch_digest");
  r.data_wait_s = f.number("data_wait_s");
  r.compute_s = f.number("compute_s");
  r.comm_s = f.number_or("comm_s", 0.0);
  r.replica_check_s = f.number_or("replica_check_s", 0.0);
  r.tokens = f.integer("tokens");
  r.loss_scale = f.number_or("loss_scale", 1.0);
  r.skipped = f.boolean_or("skipped", false);
  r.nonfinite_grad = f.str_or("nonfinite_grad", "");
  return r;
}

nlohmann::json steps_json(const std::vector<StepRecord>& steps) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& s : steps) a.push_back(s.to_json());
  return a;
}

nlohmann::json StateDigest::groups_json() const {
  nlohmann::json g{{"model", model}, {"optimizer", optimizer}, {"rng", rng}, {"step", step}};
  if (scaler) {
    g["scaler"] = *scaler;
    g["loss_scale"] = loss_scale;
  }
  return g;
}

nlohmann::json StateDigest::to_json() const {
  nlohmann::json j = groups_json();
  j["loss_scale"] = loss_scale;
  j["tensors"] = tensors;
  return j;
}

StateDigest StateDigest::from_json(const nlohmann::json& j, const std::string& where) {
  JsonFields f(j, where);
  StateDigest d;
  d.model = f.str("model");
  d.optimizer = f.str("optimizer");
  d.rng = f.str("rng");
  if (f.has("scaler")) d.scaler = f.str("scaler");
  d.loss_scale = f.number_or("loss_scale", 1.0);
  d.step = f.integer("step");
  if (f.has("tensors")) {
    for (auto it = f.object("tensors").begin(); it != f.object("tensors").end(); ++it) {
      if (!it->is_string()) throw std::invalid_argument(f.path("tensors") + "." + it.key() + " is not a string");
      d.tensors[it.key()] = it->get<std::string>();
    }
  }
  return d;
}

nlohmann::json StateBytes::to_json() const {
  return {{"parameters", parameters}, {"gradients", gradients}, {"optimizer", optimizer}};
}

StateBytes StateBytes::from_json(const nlohmann::json& j, const std::string& where) {
  JsonFields f(j, where);
  return {f.integer("parameters"), f.integer("gradients"), f.integer("optimizer")};
}

}  // namespace anchor::train
