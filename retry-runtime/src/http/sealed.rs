//! The extension traits are implemented for reqwest's types only: this trait, which no other
//! crate can name, is their supertrait.

pub trait Sealed {}
impl Sealed for reqwest::RequestBuilder {}
impl Sealed for reqwest::Response {}
