#pragma once

namespace trainrun {

// std::visit over a variant with one lambda per alternative: Overloaded{[](const A&) {...}, ...}.
template <class... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <class... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;

}  // namespace trainrun
