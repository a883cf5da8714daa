// volt._volt: the compiled half of the Python package, over the public C++ API only. The
// ONNX Runtime-shaped classes users see are in volt/*.py; this module gives them sessions, run
// options, CSR tensors and trainers, and turns volt::Error into volt's exception classes.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <string>
#include <vector>

#include "errors.hpp"
#include "numpy_values.hpp"
#include "volt/volt.hpp"

namespace py = pybind11;
using namespace volt;
using volt::python::to_named_values;
using volt::python::to_python;

namespace {

// Per-run options. `terminate = True` cancels the runs using them (from any thread) and every
// later one until it is set back to False, as in ONNX Runtime.
struct PyRunOptions {
  int64_t timeout_ms = 0;
  CancelToken cancel;
  RunOptions native() const { return RunOptions{.timeout_ms = timeout_ms, .cancel = &cancel}; }
};

py::object shape_of(const ValueInfo& v) {
  if (!v.has_shape) return py::none();
  py::list dims;
  for (const Dim& d : v.shape) {
    if (d.is_fixed())
      dims.append(d.value);
    else if (!d.symbol.empty())
      dims.append(d.symbol);
    else
      dims.append(py::none());
  }
  return dims;
}

py::list describe(const std::vector<ValueInfo>& values) {
  py::list out;
  for (const ValueInfo& v : values)
    out.append(py::make_tuple(v.name, volt::python::onnx_type_string(v), shape_of(v)));
  return out;
}

std::vector<std::string> names_of(const py::object& names) {
  if (names.is_none()) return {};
  if (py::isinstance<py::str>(names))
    throw Error(ErrorCode::InvalidArgument, "output_names must be a list of names, not a str");
  return names.cast<std::vector<std::string>>();
}

// Outputs as Python objects; a tensor that shares memory with a fed array is copied, so that
// the caller's later writes to either do not reach the other.
py::list outputs_to_python(std::vector<Value> outs, const NamedValues& fed) {
  const auto ranges = volt::python::fed_ranges(fed);
  py::list result;
  for (Value& v : outs) {
    if (v.is_tensor() && v.tensor().device().is_cpu() && v.tensor().nbytes() > 0) {
      const char* p = static_cast<const char*>(v.tensor().raw());
      for (const auto& r : ranges)
        if (p < r.end && p + v.tensor().nbytes() > r.begin) {
          v = Value(v.tensor().clone());
          break;
        }
    }
    result.append(to_python(std::move(v)));
  }
  return result;
}

class PySession {
 public:
  PySession(const py::object& model, int threads, int optimization_level, std::string device,
            std::string precision, size_t memory_limit, size_t plan_cache_size, bool winograd,
            const py::object& calibration) {
    SessionOptions o;
    o.threads = threads;
    o.optimization_level = optimization_level;
    o.device = std::move(device);
    o.precision = std::move(precision);
    o.memory_limit = memory_limit;
    o.plan_cache_size = plan_cache_size;
    o.winograd = winograd;
    if (!calibration.is_none()) o.calibration = to_named_values(calibration.cast<py::dict>(), {});
    if (py::isinstance<py::bytes>(model)) {
      const auto bytes = model.cast<py::bytes>();
      const std::string_view data(bytes);
      py::gil_scoped_release unlocked;
      session_ = std::make_unique<Session>(Session::from_bytes(data.data(), data.size(), o));
    } else {
      const std::string path = model.cast<std::string>();
      py::gil_scoped_release unlocked;
      session_ = std::make_unique<Session>(path, o);
    }
  }

  py::list inputs() const { return describe(session_->inputs()); }
  py::list outputs() const { return describe(session_->outputs()); }

  py::dict metadata() const {
    const ModelMetadata& m = session_->metadata();
    py::dict d;
    d["ir_version"] = m.ir_version;
    d["producer_name"] = m.producer_name;
    d["producer_version"] = m.producer_version;
    d["domain"] = m.domain;
    d["version"] = m.model_version;
    d["description"] = m.description;
    d["graph_name"] = m.graph_name;
    d["graph_description"] = m.graph_description;
    d["opsets"] = m.opsets;
    d["custom_metadata_map"] = m.custom;
    return d;
  }

  // run_options as an object: pybind11's pointer caster tries None as a foreign type first,
  // which formats an AttributeError (0.3 us of every call).
  py::list run(const py::object& output_names, const py::dict& feed,
               const py::object& run_options) const {
    const std::vector<std::string> names = names_of(output_names);
    const NamedValues inputs = to_named_values(feed, session_->inputs());
    const RunOptions options =
        run_options.is_none() ? RunOptions{} : run_options.cast<const PyRunOptions&>().native();
    std::vector<Value> outs;
    {
      py::gil_scoped_release unlocked;
      outs = session_->run(inputs, names, options);
    }
    return outputs_to_python(std::move(outs), inputs);
  }

  // Seconds per Session::run for the same feed, timed in C++: bench/python_overhead.py sets
  // InferenceSession.run beside it.
  double time_native(const py::dict& feed, int iterations) const {
    const NamedValues inputs = to_named_values(feed, session_->inputs());
    py::gil_scoped_release unlocked;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i) session_->run(inputs);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
           std::max(iterations, 1);
  }

 private:
  std::unique_ptr<Session> session_;
};

class PyTrainer {
 public:
  PyTrainer(const std::string& model_path, const TrainOptions& options) {
    py::gil_scoped_release unlocked;
    trainer_ = std::make_unique<Trainer>(model_path, options);
  }
  float step(const py::dict& feed) {
    const NamedValues batch = to_named_values(feed, {});
    py::gil_scoped_release unlocked;
    return trainer_->step(batch);
  }
  float evaluate(const py::dict& feed) const {
    const NamedValues batch = to_named_values(feed, {});
    py::gil_scoped_release unlocked;
    return trainer_->evaluate(batch);
  }
  py::list predict(const py::dict& feed) const {
    const NamedValues inputs = to_named_values(feed, {});
    std::vector<Value> outs;
    {
      py::gil_scoped_release unlocked;
      outs = trainer_->predict(inputs);
    }
    return outputs_to_python(std::move(outs), inputs);
  }
  Trainer& get() { return *trainer_; }
  const Trainer& get() const { return *trainer_; }

 private:
  std::unique_ptr<Trainer> trainer_;
};

CsrTensor make_csr(const py::object& values, const py::object& col_indices,
                   const py::object& row_offsets, const py::object& shape) {
  const auto dims = shape.cast<std::vector<int64_t>>();
  if (dims.size() != 2)
    throw Error(ErrorCode::InvalidArgument, "a CsrTensor's shape is (rows, cols)");
  return volt::python::csr_from_arrays(values, col_indices, row_offsets, dims[0], dims[1],
                                       "CsrTensor values");
}

}  // namespace

PYBIND11_MODULE(_volt, m) {
  m.doc() = "volt's compiled core; use the volt package";
  volt::python::init_dtypes();
  volt::python::install_error_translator();

  m.def("version", &volt::version);
  m.def("device_count",
        [](const std::string& kind) { return volt::device_count(Device::parse(kind).kind); });

  py::class_<PyRunOptions>(m, "RunOptions", py::dynamic_attr(),
                           "Per-run options: timeout_ms, and terminate (set True from any thread "
                           "to cancel the runs using them)")
      .def(py::init<>())
      .def_readwrite("timeout_ms", &PyRunOptions::timeout_ms)
      .def_property(
          "terminate", [](const PyRunOptions& r) { return r.cancel.cancelled(); },
          [](PyRunOptions& r, bool stop) { stop ? r.cancel.cancel() : r.cancel.reset(); });

  py::class_<CsrTensor>(m, "CsrTensor",
                        "A 2-D sparse matrix in CSR form; may be fed to any 2-D input of its "
                        "element type")
      .def(py::init(&make_csr), py::arg("values"), py::arg("col_indices"), py::arg("row_offsets"),
           py::arg("shape"))
      .def_property_readonly("shape",
                             [](const CsrTensor& c) { return py::make_tuple(c.rows(), c.cols()); })
      .def_property_readonly("nnz", &CsrTensor::nnz)
      .def_property_readonly("values", [](const CsrTensor& c) { return to_python(c.values()); })
      .def_property_readonly("col_indices",
                             [](const CsrTensor& c) { return to_python(c.col_indices()); })
      .def_property_readonly("row_offsets",
                             [](const CsrTensor& c) { return to_python(c.row_offsets()); })
      .def("to_dense", [](const CsrTensor& c) { return to_python(c.to_dense()); })
      .def("__repr__", [](const CsrTensor& c) {
        return "CsrTensor(" + std::string(dtype_name(c.dtype())) + shape_str(c.shape()) +
               ", nnz=" + std::to_string(c.nnz()) + ")";
      });

  py::class_<PySession>(m, "Session")
      .def(py::init<const py::object&, int, int, std::string, std::string, size_t, size_t, bool,
                    const py::object&>(),
           py::arg("model"), py::arg("threads") = 0, py::arg("optimization_level") = 2,
           py::arg("device") = "cpu", py::arg("precision") = "fp32", py::arg("memory_limit") = 0,
           py::arg("plan_cache_size") = 64, py::arg("winograd") = true,
           py::arg("calibration") = py::none())
      .def("inputs", &PySession::inputs)
      .def("outputs", &PySession::outputs)
      .def("metadata", &PySession::metadata)
      .def("run", &PySession::run, py::arg("output_names"), py::arg("input_feed"),
           py::arg("run_options") = py::none())
      .def("time_native", &PySession::time_native);

  py::class_<PyTrainer>(m, "Trainer")
      .def(py::init<const std::string&, const TrainOptions&>())
      .def("step", &PyTrainer::step)
      .def("evaluate", &PyTrainer::evaluate)
      .def("predict", &PyTrainer::predict)
      .def_property(
          "learning_rate", [](const PyTrainer& t) { return t.get().learning_rate(); },
          [](PyTrainer& t, float lr) { t.get().set_learning_rate(lr); })
      .def_property_readonly("steps", [](const PyTrainer& t) { return t.get().steps(); })
      .def_property_readonly("loss_scale", [](const PyTrainer& t) { return t.get().loss_scale(); })
      .def_property_readonly("skipped_steps",
                             [](const PyTrainer& t) { return t.get().skipped_steps(); })
      .def_property_readonly("rank", [](const PyTrainer& t) { return t.get().rank(); })
      .def_property_readonly("world_size", [](const PyTrainer& t) { return t.get().world_size(); })
      .def_property_readonly("exchanged_bytes",
                             [](const PyTrainer& t) { return t.get().exchanged_bytes(); })
      .def_property_readonly("trainable", [](const PyTrainer& t) { return t.get().trainable(); })
      .def("weight",
           [](const PyTrainer& t, const std::string& name) {
             return to_python(t.get().weight(name).clone());
           })
      .def("save_checkpoint",
           [](const PyTrainer& t, const std::string& path) {
             py::gil_scoped_release unlocked;
             t.get().save_checkpoint(path);
           })
      .def("load_checkpoint",
           [](PyTrainer& t, const std::string& path) {
             py::gil_scoped_release unlocked;
             t.get().load_checkpoint(path);
           })
      .def("export", [](const PyTrainer& t, const std::string& path) {
        py::gil_scoped_release unlocked;
        t.get().export_model(path);
      });
}
