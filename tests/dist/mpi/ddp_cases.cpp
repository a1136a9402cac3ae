// DistributedDataParallel across ranks: identical replicas, the equivalence with one process on
// the whole batch, one all-reduce per bucket per optimizer step under no_sync, buckets launched
// during backward, AMP skipping the same steps everywhere, checkpointing, and misuse.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "dist_test_support.hpp"
#include "ember/amp/grad_scaler.hpp"
#include "ember/dist/ddp.hpp"
#include "ember/nn/linear.hpp"
#include "ember/nn/loss.hpp"
#include "ember/nn/mlp.hpp"
#include "ember/nn/sequential.hpp"
#include "ember/train/accumulation.hpp"
#include "ember/train/adamw.hpp"
#include "ember/train/captured_step.hpp"
#include "ember/train/residual_mlp.hpp"
#include "ember/train/sgd.hpp"
#include "test_support.hpp"

namespace ember::testing {
namespace {

constexpr int64_t kIn = 6;
constexpr int64_t kClasses = 5;
constexpr int64_t kBatch = 8;  // per rank

class Ddp : public DistOnDevice {
 protected:
  std::shared_ptr<nn::Sequential> model(uint64_t seed, bool checkpoint = false, float dropout = 0,
                                        int64_t depth = 2) const {
    return train::make_residual_mlp({.inputs = kIn,
                                     .width = 16,
                                     .depth = depth,
                                     .expansion = 2,
                                     .outputs = kClasses,
                                     .dropout = dropout,
                                     .checkpoint = checkpoint,
                                     .seed = seed,
                                     .device = device()});
  }
  // Rows [first, first + n) of a fixed dataset for `step`: the same rows on every rank.
  std::pair<Tensor, Tensor> batch(int step, int64_t first, int64_t n) const {
    Tensor x = Tensor::empty({first + n, kIn});
    x.uniform_(1000 + static_cast<uint64_t>(step), -1, 1);
    std::vector<int32_t> y(static_cast<size_t>(first + n));
    for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<int32_t>((i * 7 + step) % kClasses);
    Tensor labels = Tensor::from_vector(y, {first + n});
    return {x.slice(first, first + n).to(device()), labels.slice(first, first + n).to(device())};
  }
  // forward + backward of one (micro-)batch; dloss as given.
  static void forward_backward(nn::Module& m, nn::Context& ctx, const std::pair<Tensor, Tensor>& b,
                               const Tensor& dloss) {
    nn::SoftmaxCrossEntropy loss;
    loss.forward(ctx, m.forward(ctx, b.first), b.second);
    m.backward(ctx, loss.backward(ctx, dloss));
  }
  static std::vector<float> flat(nn::Module& m) {
    std::vector<float> out;
    for (nn::Parameter* p : m.parameters()) {
      const auto v = p->value.to(Device::cpu()).to_vector<float>();
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  }
  static std::vector<float> flat_grads(nn::Module& m) {
    std::vector<float> out;
    for (nn::Parameter* p : m.parameters()) {
      const auto v = p->grad.to(Device::cpu()).to_vector<float>();
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  }
  Tensor one() const { return Tensor::full({1}, 1.0, DType::f32, stream()); }
};

TEST_P(Ddp, RanksHoldBitwiseIdenticalParameters) {
  // Each rank starts from its own initialization: the broadcast makes them rank 0's.
  dist::DistributedDataParallel ddp(model(10 + static_cast<uint64_t>(rank()), false, 0.1f), world(),
                                    {.bucket_cap_mb = 0.003, .first_bucket_mb = 0.001});
  ASSERT_GT(ddp.buckets().size(), 2u);
  train::AdamW opt(ddp.parameters(), {.lr = 1e-2f});
  Stream s = stream();
  nn::Context ctx{s};
  for (int step = 0; step < 4; ++step) {
    opt.zero_grad();
    forward_backward(ddp, ctx, batch(step, rank() * kBatch, kBatch), one());
    opt.step(s);
    ++ctx.step;
  }
  const auto all = gather_all(flat(ddp));
  for (int r = 1; r < ranks(); ++r) EXPECT_EQ(all[r], all[0]) << "rank " << r << " differs";
  const auto g = gather_all(flat_grads(ddp));
  for (int r = 1; r < ranks(); ++r) EXPECT_EQ(g[r], g[0]) << "rank " << r << "'s gradients";
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, float rel) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-6f + rel * std::fabs(want[i])) << "element " << i;
  }
}

// W ranks on batch B: the parameters of one process on the W x B rows, within f32 rounding
// (the mean over W x B is summed in another order): 1e-5 relative.
TEST_P(Ddp, MatchesOneProcessOnTheWholeBatch) {
  dist::DistributedDataParallel ddp(model(3), world());
  auto whole = model(3);
  train::SGD a(ddp.parameters(), {.lr = 0.05f, .momentum = 0.9f});
  train::SGD b(whole->parameters(), {.lr = 0.05f, .momentum = 0.9f});
  Stream s = stream();
  nn::Context ctx{s};
  for (int step = 0; step < 3; ++step) {
    a.zero_grad();
    b.zero_grad();
    forward_backward(ddp, ctx, batch(step, rank() * kBatch, kBatch), one());
    forward_backward(*whole, ctx, batch(step, 0, kBatch * ranks()), one());
    a.step(s);
    b.step(s);
  }
  expect_close(flat(ddp), flat(*whole), 1e-5f);
}

// K micro-batches with no_sync on all but the last: one all-reduce per bucket per optimizer step,
// and the parameters of one process on all W x K x B rows.
TEST_P(Ddp, NoSyncCommunicatesOncePerBucketPerStep) {
  constexpr int kMicro = 3;
  dist::DistributedDataParallel ddp(model(4), world(),
                                    {.bucket_cap_mb = 0.003, .first_bucket_mb = 0.001});
  auto whole = model(4);
  train::AdamW a(ddp.parameters(), {.lr = 1e-2f});
  train::AdamW b(whole->parameters(), {.lr = 1e-2f});
  train::Accumulation accumulation(kMicro);
  Stream s = stream();
  nn::Context ctx{s};
  const auto buckets = static_cast<uint64_t>(ddp.buckets().size());
  for (int step = 0; step < 2; ++step) {
    a.zero_grad();
    const uint64_t before = world().collectives();
    accumulation.run(ctx, [&](const train::MicroBatch& mb) {
      ddp.set_sync(mb.last);
      const int64_t first = (mb.index * ranks() + rank()) * kBatch;
      forward_backward(ddp, ctx, batch(step, first, kBatch), mb.dloss);
    });
    ddp.set_sync(true);
    EXPECT_EQ(world().collectives() - before, buckets) << "step " << step;
    a.step(s);
    b.zero_grad();
    forward_backward(*whole, ctx, batch(step, 0, kBatch * kMicro * ranks()), one());
    b.step(s);
  }
  EXPECT_EQ(ddp.synced_backwards(), 2);
  EXPECT_EQ(ddp.bucket_all_reduces(), static_cast<int64_t>(2 * buckets));
  expect_close(flat(ddp), flat(*whole), 1e-4f);
}

// The whole DDP step captured as one CUDA graph (train::CapturedStep): two accumulated
// micro-batches (the first under no_sync), dropout drawn from the published step counter, the
// buckets' all-reduces on the communication stream (which joins the capture), AdamW. Its replays
// give each rank the parameters of the same steps run eagerly, bitwise, and every replay reduces
// every bucket once. On the CPU the captured step runs eagerly (nothing to capture): the same
// parameters all the same.
TEST_P(Ddp, ACapturedStepReplaysAsEagerSteps) {
  const dist::DdpOptions options{.bucket_cap_mb = 0.003, .first_bucket_mb = 0.001};
  dist::DistributedDataParallel eager(model(7, false, 0.2f), world(), options);
  dist::DistributedDataParallel graphed(model(7, false, 0.2f), world(), options);
  ASSERT_GT(graphed.buckets().size(), 2u);
  train::AdamW eager_opt(eager.parameters(), {.lr = 1e-2f});
  train::AdamW graphed_opt(graphed.parameters(), {.lr = 1e-2f});
  Stream s = stream();
  nn::Context eager_ctx{s}, graphed_ctx{s};
  graphed_ctx.step_counter = Tensor::zeros({1}, DType::i64, s);
  auto step = [&](dist::DistributedDataParallel& ddp, train::AdamW& opt, nn::Context& ctx,
                  const std::pair<Tensor, Tensor>* micro) {
    opt.zero_grad();
    train::Accumulation(2).run(ctx, [&](const train::MicroBatch& mb) {
      ddp.set_sync(mb.last);
      forward_backward(ddp, ctx, micro[mb.index], mb.dloss);
    });
    ddp.set_sync(true);
    opt.step(s);
  };
  const int64_t half = kBatch / 2;
  std::pair<Tensor, Tensor> fixed[2];  // the graph's inputs, refilled before each run
  for (auto& f : fixed) {
    f = {Tensor::empty({half, kIn}, DType::f32, s), Tensor::empty({half}, DType::i32, s)};
  }
  train::CapturedStep captured(
      s, [&] { step(graphed, graphed_opt, graphed_ctx, fixed); },
      train::CapturedStep::Options{.optimizers = {&graphed_opt}});
  const auto buckets = static_cast<int64_t>(graphed.buckets().size());
  for (int i = 0; i < 4; ++i) {
    std::pair<Tensor, Tensor> micro[2];
    for (int m = 0; m < 2; ++m) micro[m] = batch(2 * i + m, rank() * half, half);
    step(eager, eager_opt, eager_ctx, micro);
    for (int m = 0; m < 2; ++m) {
      fixed[m].first.copy_(micro[m].first);
      fixed[m].second.copy_(micro[m].second);
    }
    const uint64_t first = graphed_ctx.step;
    graphed_ctx.publish_step();
    captured.run();
    graphed_ctx.step = first + 2;  // a replay runs no host code
  }
  if (device().is_cuda()) {
    EXPECT_EQ(captured.replays(), 3) << captured.describe();
    // Host-side counts stop at the capture: the warm-up and the capture launched every bucket.
    EXPECT_EQ(graphed.bucket_all_reduces(), 2 * buckets);
  } else {
    EXPECT_FALSE(captured.eager_reason().empty());
  }
  EXPECT_EQ(flat(graphed), flat(eager));
  const auto all = gather_all(flat(graphed));
  for (int r = 1; r < ranks(); ++r) EXPECT_EQ(all[r], all[0]) << "rank " << r << " differs";
}

// A communicator whose all-reduces complete only once DDP waits for them (after backward): each
// launch sees every earlier bucket still in flight, so buckets go out during backward.
class HeldCommunicator : public dist::Communicator {
 public:
  using dist::Communicator::Communicator;
  dist::Work all_reduce(Stream& stream, const Tensor& t, dist::ReduceOp op) override {
    int in_flight = 0;
    for (auto& h : held_) in_flight += h->released ? 0 : 1;
    in_flight_at_launch.push_back(in_flight);
    auto held = std::make_shared<Held>(dist::Communicator::all_reduce(stream, t, op));
    held_.push_back(held);
    return dist::Work(held);
  }
  std::vector<int> in_flight_at_launch;

 private:
  struct Held : dist::detail::PendingWork {
    explicit Held(dist::Work w) : inner(std::move(w)) {}
    bool test() override { return released && inner.done(); }
    void wait() override {
      released = true;
      inner.wait();
    }
    void wait(const Stream& s) override {
      released = true;
      inner.wait(s);
    }
    std::string describe() const override { return "held " + inner.pending()->describe(); }
    dist::Work inner;
    bool released = false;
  };
  std::vector<std::shared_ptr<Held>> held_;
};

TEST_P(Ddp, BucketsAreLaunchedDuringBackward) {
  HeldCommunicator comm(world().launch(), {.timeout_seconds = 60});
  dist::DistributedDataParallel ddp(model(5), comm,
                                    {.bucket_cap_mb = 0.003, .first_bucket_mb = 0.001});
  const int64_t total = static_cast<int64_t>(ddp.parameters().size());
  const size_t buckets = ddp.buckets().size();
  ASSERT_GE(buckets, 3u);
  Stream s = stream();
  nn::Context ctx{s};
  forward_backward(ddp, ctx, batch(0, rank() * kBatch, kBatch), one());
  ASSERT_EQ(ddp.last_launches().size(), buckets);
  for (size_t b = 0; b < buckets; ++b) {
    const auto& launch = ddp.last_launches()[b];
    EXPECT_TRUE(launch.during_backward) << b;
    if (b + 1 < buckets) {
      EXPECT_LT(launch.gradients_ready, total) << b;
    }
    // Every earlier bucket's all-reduce was still in flight at this launch.
    EXPECT_EQ(comm.in_flight_at_launch[comm.in_flight_at_launch.size() - buckets + b],
              static_cast<int>(b));
  }
}

// DDP compared the model and its buckets across ranks at construction: under check_metadata 2
// (the debug builds' default) its bucket all-reduces make no blocking host check each, while a
// collective of the user's is still checked; under 1 (EMBER_DIST_CHECK=1) every bucket is.
TEST_P(Ddp, BucketsAreCheckedOnlyWhereAskedFor) {
  for (const int mode : {2, 1}) {
    dist::Communicator comm(world().launch(), {.timeout_seconds = 60, .check_metadata = mode});
    ASSERT_EQ(comm.check_metadata_mode(), mode);
    dist::DistributedDataParallel ddp(model(5), comm,
                                      {.bucket_cap_mb = 0.003, .first_bucket_mb = 0.001});
    const auto buckets = static_cast<uint64_t>(ddp.buckets().size());
    ASSERT_GE(buckets, 3u);
    Stream s = stream();
    nn::Context ctx{s};
    const uint64_t checks = comm.metadata_checks();
    const uint64_t collectives = comm.collectives();
    forward_backward(ddp, ctx, batch(0, rank() * kBatch, kBatch), one());
    EXPECT_EQ(comm.collectives() - collectives, buckets) << "mode " << mode;
    EXPECT_EQ(comm.metadata_checks() - checks, mode == 2 ? 0 : buckets) << "mode " << mode;
    Tensor loss = Tensor::zeros({1}, DType::f32, s);
    comm.all_reduce(s, loss).wait(s);  // the user's own collective: checked in both modes
    EXPECT_EQ(comm.metadata_checks() - checks, (mode == 2 ? 0 : buckets) + 1) << "mode " << mode;
  }
}

// A non-finite gradient on one rank only (after the all-reduce): with the found-inf flag reduced
// across ranks, every rank skips the step and backs off.
TEST_P(Ddp, AmpSkipsTheSameStepsOnEveryRank) {
  dist::DistributedDataParallel ddp(model(6), world());
  train::AdamW opt(ddp.parameters(), {.lr = 1e-2f});
  amp::GradScaler scaler(device(), {.sync_found_inf = dist::found_inf_all_reduce(world())});
  Stream s = stream();
  nn::Context ctx{s, true, nn::Precision::f16};
  const auto before = flat(ddp);
  for (int step = 0; step < 2; ++step) {
    opt.zero_grad();
    forward_backward(ddp, ctx, batch(step, rank() * kBatch, kBatch), scaler.scale());
    if (step == 0 && rank() == ranks() - 1) {
      ddp.parameters()[0]->grad.fill_(std::numeric_limits<double>::infinity());
    }
    scaler.step(s, opt);
    scaler.update(s);
    if (step == 0) {
      EXPECT_EQ(scaler.get_scale(), 32768.0f);
      EXPECT_EQ(opt.applied_steps(), 0);
      EXPECT_EQ(flat(ddp), before);
    }
  }
  EXPECT_EQ(opt.applied_steps(), 1);
  EXPECT_EQ(scaler.skipped_steps(), 1);
  const auto all = gather_all(flat(ddp));
  for (int r = 1; r < ranks(); ++r) EXPECT_EQ(all[r], all[0]) << "rank " << r;
}

// Checkpointed blocks fire their grad-ready callbacks from the recomputation: the buckets fill and
// the reduced gradients are bitwise those of the plain model.
TEST_P(Ddp, CheckpointedBlocksFillTheBuckets) {
  dist::DistributedDataParallel plain(model(7), world(),
                                      {.bucket_cap_mb = 0.003, .first_bucket_mb = 0.001});
  dist::DistributedDataParallel ckpt(model(7, true), world(),
                                     {.bucket_cap_mb = 0.003, .first_bucket_mb = 0.001});
  Stream s = stream();
  nn::Context ctx{s};
  forward_backward(plain, ctx, batch(0, rank() * kBatch, kBatch), one());
  forward_backward(ckpt, ctx, batch(0, rank() * kBatch, kBatch), one());
  EXPECT_EQ(flat_grads(ckpt), flat_grads(plain));
  EXPECT_EQ(ckpt.last_launches().size(), ckpt.buckets().size());
}

TEST_P(Ddp, ModelsThatDifferAcrossRanksAreAnError) {
  expect_error(
      [&] { dist::DistributedDataParallel(model(8, false, 0, 1 + (rank() == 1)), world()); },
      {"the module differs across ranks", "every rank must build the same model"});
  // Same count and sizes, other names or shapes: still found.
  // Linear(4, h) and Linear(h, o): 51 elements for (h, o) = (6, 3) and (3, 9).
  auto m = nn::make_mlp({.inputs = 4,
                         .hidden = rank() == 1 ? 3 : 6,
                         .depth = 1,
                         .outputs = rank() == 1 ? 9 : 3,
                         .seed = 1,
                         .device = device()});
  expect_error([&] { dist::DistributedDataParallel(m, world()); },
               {"(their names, shapes or dtypes differ)", "; parameter 0 is '"});
  // The same model with buckets cut differently on one rank.
  expect_error(
      [&] {
        dist::DistributedDataParallel(model(8, false, 0, 1), world(),
                                      {.bucket_cap_mb = rank() == 1 ? 0.5 : 0.25});
      },
      {"the bucket sizes differ across ranks", "every rank must pass the same DdpOptions"});
  // The first parameter that differs is named as each side has it.
  auto named = std::make_shared<nn::Sequential>();
  named->add(rank() == 1 ? "b" : "a",
             std::make_shared<nn::Linear>(4, 3, nn::LinearOptions{.seed = 1, .device = device()}));
  expect_error([&] { dist::DistributedDataParallel(named, world()); },
               {"parameter 0 is '", "'b.weight' f32[3, 4]", "'a.weight' f32[3, 4]"});
}

INSTANTIATE_DIST_DEVICES(Ddp);

}  // namespace
}  // namespace ember::testing
