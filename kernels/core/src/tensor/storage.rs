//! Memory carriers: what a tensor's elements live in.
//!
//! Owning tensors carry a `Vec<T>`, shallow ones a borrowed [`HostData`] or [`HostDataMut`]. The
//! geometry types ([`super::Dense`], [`super::Ragged`]) are generic over the carrier, which is
//! how one implementation serves both the owning and the non-owning flavour.

use crate::dtype::{DataType, Element, HostData, HostDataMut};

/// A carrier that can lend its elements for reading.
pub trait Storage: Send + Sync {
    /// The elements.
    fn view(&self) -> HostData<'_>;
    /// Their runtime type.
    fn data_type(&self) -> DataType {
        self.view().data_type()
    }
    /// How many there are.
    fn len(&self) -> usize {
        self.view().len()
    }
    /// Whether there are none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A carrier that can also lend its elements for writing.
pub trait StorageMut: Storage {
    /// The elements, mutably.
    fn view_mut(&mut self) -> HostDataMut<'_>;
}

impl<T: Element> Storage for Vec<T> {
    fn view(&self) -> HostData<'_> {
        T::host_data(self)
    }
}

impl<T: Element> StorageMut for Vec<T> {
    fn view_mut(&mut self) -> HostDataMut<'_> {
        T::host_data_mut(self)
    }
}

impl Storage for HostData<'_> {
    fn view(&self) -> HostData<'_> {
        *self
    }
}

impl Storage for HostDataMut<'_> {
    fn view(&self) -> HostData<'_> {
        self.as_ref()
    }
}

impl StorageMut for HostDataMut<'_> {
    fn view_mut(&mut self) -> HostDataMut<'_> {
        self.reborrow()
    }
}
