// A move-only `void()` callable that keeps small callables (up to kInlineBytes, the usual lambda
// capturing a few pointers) inside itself instead of on the heap: what the scheduler stores per
// event, so scheduling an event allocates nothing. Larger callables fall back to one allocation.
// Constructible from nullptr or an empty std::function / function pointer, which give an empty one.
#pragma once
#include <cstddef>
#include <cstring>
#include <functional>
#include <new>
#include <type_traits>
#include <utility>

namespace softhca::sim {

class InlineCallback {
 public:
  // Room for six pointers: a lambda capturing `this` and a few indices, or a std::function.
  static constexpr size_t kInlineBytes = 48;

  InlineCallback() noexcept = default;
  InlineCallback(std::nullptr_t) noexcept {}  // NOLINT: implicit, like std::function

  // What a callback can be made from: any void() callable but another InlineCallback.
  template <class F>
  static constexpr bool kAccepts =
      !std::is_same_v<std::remove_cvref_t<F>, InlineCallback> && std::is_invocable_r_v<void, std::decay_t<F>&>;

  template <class F>
    requires kAccepts<F>
  InlineCallback(F&& f) {  // NOLINT: implicit, like std::function
    emplace(std::forward<F>(f));
  }

  // Replaces the stored callable with f (constructed in place when it fits).
  template <class F>
    requires kAccepts<F>
  void emplace(F&& f) {
    reset();
    using D = std::decay_t<F>;
    if constexpr (std::is_pointer_v<D> || std::is_member_pointer_v<D> ||
                  std::is_same_v<D, std::function<void()>>) {
      if (!f) return;  // an empty function object makes an empty callback
    }
    if constexpr (fits_inline<D>()) {
      ::new (static_cast<void*>(buf_)) D(std::forward<F>(f));
      ops_ = &kInlineOps<D>;
    } else {
      D* p = new D(std::forward<F>(f));
      std::memcpy(buf_, &p, sizeof p);
      ops_ = &kHeapOps<D>;
    }
  }

  InlineCallback(InlineCallback&& o) noexcept { take(o); }
  InlineCallback& operator=(InlineCallback&& o) noexcept {
    if (this != &o) {
      reset();
      take(o);
    }
    return *this;
  }
  InlineCallback& operator=(std::nullptr_t) noexcept {
    reset();
    return *this;
  }
  InlineCallback(const InlineCallback&) = delete;
  InlineCallback& operator=(const InlineCallback&) = delete;
  ~InlineCallback() { reset(); }

  explicit operator bool() const noexcept { return ops_ != nullptr; }
  // Calls the stored callable; the callback must not be empty.
  void operator()() { ops_->invoke(buf_); }

  void reset() noexcept {
    if (ops_ != nullptr && ops_->destroy != nullptr) ops_->destroy(buf_);
    ops_ = nullptr;
  }

 private:
  struct Ops {
    void (*invoke)(void* storage);
    // Null: the storage may be copied bytewise (trivially copyable inline callables, heap pointers).
    void (*move_to)(void* dst, void* src) noexcept;
    // Null: nothing to destroy.
    void (*destroy)(void* storage) noexcept;
  };

  template <class D>
  static constexpr bool fits_inline() {
    return sizeof(D) <= kInlineBytes && alignof(D) <= alignof(std::max_align_t) &&
           std::is_nothrow_move_constructible_v<D>;
  }

  template <class D>
  static constexpr Ops kInlineOps = {
      [](void* s) { (*std::launder(static_cast<D*>(s)))(); },
      std::is_trivially_copyable_v<D> ? nullptr
                                      : +[](void* dst, void* src) noexcept {
                                          D* from = std::launder(static_cast<D*>(src));
                                          ::new (dst) D(std::move(*from));
                                          from->~D();
                                        },
      std::is_trivially_destructible_v<D> ? nullptr
                                          : +[](void* s) noexcept { std::launder(static_cast<D*>(s))->~D(); },
  };

  template <class D>
  static D* heap_ptr(void* s) {
    D* p;
    std::memcpy(&p, s, sizeof p);
    return p;
  }
  template <class D>
  static constexpr Ops kHeapOps = {
      [](void* s) { (*heap_ptr<D>(s))(); },
      nullptr,
      [](void* s) noexcept { delete heap_ptr<D>(s); },
  };

  void take(InlineCallback& o) noexcept {
    ops_ = o.ops_;
    if (ops_ == nullptr) return;
    if (ops_->move_to == nullptr) {
      std::memcpy(buf_, o.buf_, kInlineBytes);
    } else {
      ops_->move_to(buf_, o.buf_);
    }
    o.ops_ = nullptr;
  }

  alignas(std::max_align_t) unsigned char buf_[kInlineBytes];
  const Ops* ops_ = nullptr;
};

}  // namespace softhca::sim
