// DistributedDataParallel: data-parallel training of a module, one replica per rank.
//
//   auto comm = dist::init();
//   auto model = std::make_shared<dist::DistributedDataParallel>(train::make_mlp(...), *comm);
//   train::AdamW optimizer(model->parameters(), ...);      // unchanged
//   model->forward(ctx, x); model->backward(ctx, dloss);   // gradients averaged over ranks
//   optimizer.step(stream);
//
// At construction rank 0's parameters are broadcast to every rank (a module whose parameters
// differ across ranks in names, shapes or dtypes is an Error), and the gradients move into
// buckets: flat f32 buffers of about bucket_cap_mb (the first, holding the last parameters,
// first_bucket_mb), filled in reverse parameter order, the order backward finishes them. Each
// parameter's gradient becomes a view into its bucket (no copy). In backward, the grad-ready
// callbacks count each bucket's gradients; a bucket whose gradients are all final is
// all-reduced (averaged) at once, while backward goes on with the layers below, and buckets are
// launched in a fixed order, so that every rank reduces the same buffers in the same sequence and
// holds identical gradients. backward() returns when the last bucket is launched; the averaged
// gradients are ordered on ctx.stream (CUDA: on the device, the host does not wait; CPU: done).
//
// no_sync() (for gradient accumulation, train::MicroBatch::last) skips communication: the
// gradients add up locally and the next synchronized backward averages the sum.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ember/dist/communicator.hpp"
#include "ember/nn/wrapper.hpp"

namespace ember::dist {

struct DdpOptions {
  double bucket_cap_mb = 25.0;       // MiB per bucket, > 0 (a larger parameter gets a bucket alone)
  double first_bucket_mb = 1.0;      // the first bucket's cap: communication starts sooner
  bool broadcast_parameters = true;  // rank 0's values to every rank at construction
};

class DistributedDataParallel : public nn::Wrapper {
 public:
  // Every parameter of `module` must be f32 on one device: the CPU (MPI) or the rank's GPU
  // (NCCL); the communicator must outlive this.
  DistributedDataParallel(std::shared_ptr<nn::Module> module, Communicator& comm,
                          DdpOptions options = {});
  ~DistributedDataParallel() override;

  Tensor forward(nn::Context& ctx, const Tensor& x) override;
  // The module's backward, then the last buckets' all-reduces; the gradients are averaged over
  // ranks when it returns (ordered on ctx.stream). Every parameter must get its gradient (an
  // Error lists those that did not).
  Tensor backward(nn::Context& ctx, const Tensor& dy) override;
  std::string name() const override { return "DistributedDataParallel(" + inner_->name() + ")"; }
  // A callback of the user's runs after DDP's own, for each parameter.
  void set_grad_ready_callback(nn::GradReadyCallback callback) override;

  // While the returned guard lives, backward communicates nothing (gradients accumulate).
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp) : ddp_(&ddp), before_(ddp.sync_) {
      ddp.sync_ = false;
    }
    ~NoSync() {
      if (ddp_) ddp_->sync_ = before_;
    }
    NoSync(NoSync&& other) noexcept : ddp_(other.ddp_), before_(other.before_) {
      other.ddp_ = nullptr;
    }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;
    NoSync& operator=(NoSync&&) = delete;

   private:
    DistributedDataParallel* ddp_;
    bool before_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }
  // The same, as a switch: false skips communication until set back to true (from the next
  // backward on: a change during a backward does not affect it).
  void set_sync(bool on) { sync_ = on; }
  bool sync() const { return sync_; }

  struct Bucket {
    std::vector<std::string> parameters;  // in the order they are packed (reverse of the model's)
    int64_t elements = 0;                 // of the buffer, padding included
  };
  std::vector<Bucket> buckets() const;

  // One bucket's all-reduce in the last synchronized backward: when it was launched.
  struct Launch {
    int bucket = 0;
    int64_t gradients_ready = 0;   // of all parameters, when it was launched
    bool during_backward = false;  // launched from a grad-ready callback, before backward ended
  };
  const std::vector<Launch>& last_launches() const { return launches_; }
  // Synchronized backwards so far, and bucket all-reduces launched.
  int64_t synced_backwards() const { return synced_backwards_; }
  int64_t bucket_all_reduces() const { return bucket_all_reduces_; }
  // Host seconds the last synchronized backward spent waiting for all-reduces after the module's
  // backward ended (CPU: the exposed communication; CUDA: ~0, the wait is on the device).
  double last_exposed_wait_seconds() const { return exposed_wait_; }

  Communicator& communicator() { return comm_; }

 private:
  struct BucketState {
    Bucket info;
    Tensor buffer;        // f32 [elements]
    int64_t pending = 0;  // gradients not yet ready in this backward
    int64_t size = 0;     // parameters in it
    Work work;
    bool launched = false;
  };
  struct Slot {
    int bucket = 0;
    bool ready = false;
    const void* grad_data = nullptr;  // the gradient view DDP made
  };

  void on_grad_ready(nn::Parameter& p, Stream& stream);
  // Launches, on `stream`, the buckets whose gradients are all ready, in bucket order.
  void launch_ready_buckets(Stream& stream, bool during_backward);
  void reset_backward();
  void drain_launched() noexcept;

  Communicator& comm_;
  DdpOptions options_;
  std::vector<BucketState> buckets_;
  std::unordered_map<const nn::Parameter*, Slot> slots_;
  std::vector<nn::Parameter*> order_;  // the model's parameter order
  nn::GradReadyCallback user_callback_;
  bool sync_ = true;
  bool syncing_ = true;  // sync_ as the current backward began
  bool in_backward_ = false;
  int next_launch_ = 0;
  int64_t ready_ = 0;
  std::vector<Launch> launches_;
  int64_t synced_backwards_ = 0;
  int64_t bucket_all_reduces_ = 0;
  double exposed_wait_ = 0;
};

// For amp::GradScalerOptions::sync_found_inf: the found-inf flag all-reduced with max over the
// communicator's ranks, so that every rank skips the same steps.
std::function<void(Stream&, const Tensor&)> found_inf_all_reduce(Communicator& comm);

}  // namespace ember::dist
